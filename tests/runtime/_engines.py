"""The engines a reference test runs the same comparison on (runtime/core/engines.py): the CPU
provider always, OpenVINO f32 (same tolerance) where the extra is installed; bf16 has its own
gate (a cosine, contract.BF16_MIN_MEAN_COSINE), so tests name it where they check it."""
from __future__ import annotations

import numpy as np
import pytest

from bertonnx.runtime.core import engines, openvino_engine

# why it cannot run here (no extra, or a CPU OpenVINO offers no device for); "" where it can, since
# skipif wants a reason string even when it does not skip
NO_OPENVINO = engines.unavailable("openvino") or ""
OPENVINO = not NO_OPENVINO
BF16 = OPENVINO and openvino_engine.has_bf16()
NO_BF16 = (NO_OPENVINO if not OPENVINO else
           "this CPU has no bf16 arithmetic (AMX-BF16 or AVX512-BF16): OpenVINO would run f32")

# exact engines: every fp32 tolerance holds on each
EXACT = [pytest.param("cpu", id="cpu"),
         pytest.param("openvino:f32", id="openvino-f32",
                      marks=pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO))]


def padded_feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    """Right-padded random batches (row lengths 1..seq) of every input a graph may declare."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 60, (batch, seq))
    mask = np.zeros((batch, seq), np.int64)
    for i, n in enumerate(rng.integers(1, seq + 1, batch)):
        mask[i, :n] = 1
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
