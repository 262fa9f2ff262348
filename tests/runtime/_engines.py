"""The engines a reference test runs the same comparison on (runtime/core/engines.py): the CPU
provider always, OpenVINO f32 (same tolerance) where the extra is installed; bf16 has its own
gate (a cosine, contract.BF16_MIN_MEAN_COSINE), so tests name it where they check it."""
from __future__ import annotations

import pytest

from bertonnx.runtime.core import engines

# why it cannot run here (no extra, or a CPU its plugin skips); "" where it can, since
# skipif wants a reason string even when it does not skip
NO_OPENVINO = engines.unavailable("openvino") or ""
OPENVINO = not NO_OPENVINO
BF16 = OPENVINO and engines.has_bf16()
NO_BF16 = (NO_OPENVINO if not OPENVINO else
           "this CPU has no bf16 arithmetic (AMX-BF16 or AVX512-BF16): OpenVINO would run f32")

# exact engines: every fp32 tolerance holds on each
EXACT = [pytest.param("cpu", id="cpu"),
         pytest.param("openvino:f32", id="openvino-f32",
                      marks=pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO))]
