"""A BGE-M3 folder's two heads carried into its export (runtime/core/bge_m3.py says what they
are): FlagEmbedding saves them as torch pickles (colbert_linear.pt, sparse_linear.pt), read here
once with torch.load(weights_only=True) — never unpickling code — and written beside the graph
as one float32 safetensors file the torch-free runtime reads. Reference: FlagEmbedding 1.4.2
finetune/embedder/encoder_only/m3/runner.py (get_model: `torch.load(..., weights_only=True)`
into `Linear(H, D)` and `Linear(H, 1)`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

from bertonnx.runtime.core.bge_m3 import (HEAD_FILES, WEIGHTS, M3Heads, is_bge_m3_folder,
                                          read_heads)
from bertonnx.runtime.core.contract import FP32_ATOL
from bertonnx.runtime.core.errors import ArtifactError, CheckFailed, ConfigError
from bertonnx.runtime.core.files import read_json_object


def _linear(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A Linear layer's (weight, bias) from a torch.save'd state dict."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch's unpickling errors run to many lines
        raise ArtifactError(f"{path} cannot be read as weights ({type(e).__name__})",
                            "restore the file from the model's repository") from None
    if not isinstance(state, dict) or not all(
            isinstance(state.get(k), torch.Tensor) for k in ("weight", "bias")):
        raise ArtifactError(f"{path} is not a Linear layer's state dict (weight, bias)",
                            "restore the file from the model's repository")
    return tuple(state[k].detach().float().numpy() for k in ("weight", "bias"))


def carry_heads(source: Path | None, out: Path) -> dict:
    """The manifest's record of `source`'s heads, their weights written into `out`."""
    if source is None or not is_bge_m3_folder(source):
        raise ConfigError(f"{source or 'the model'} is not a BGE-M3 folder (no "
                          f"{' and '.join(HEAD_FILES)} beside the encoder)",
                          "export a folder FlagEmbedding saved (BAAI/bge-m3) with --task bge-m3")
    heads = M3Heads(*_linear(source / HEAD_FILES[0]), *_linear(source / HEAD_FILES[1]))
    hidden_size = read_json_object(source / "config.json", "restore the file").get("hidden_size")
    if heads.hidden_size != hidden_size:
        raise ArtifactError(f"{source / HEAD_FILES[0]} reads {heads.hidden_size}-wide token "
                            f"vectors, the encoder answers {hidden_size}",
                            "export the folder the heads were trained with")
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in heads.tensors().items()},
              str(out / WEIGHTS))
    record = heads.to_json()
    read_heads(out, record, out)   # the runtime's own reader and shape checks, on what it reads
    return record


def carries_heads(record: dict) -> bool:
    """Whether an export's manifest record (`carry_heads`'s) holds BGE-M3 heads."""
    return "bge_m3" in record


def judge_heads(reference, graph: Path, folder: Path, record: dict,
                atol: float = FP32_ATOL) -> dict:
    """The three outputs' parity: the runtime's heads (pipelines/bge_m3.py, numpy) on the graph's
    token vectors against FlagEmbedding's computation in torch (F.linear, relu, F.normalize) on
    the torch model's, over the parity grid (`reference`: its per-row unpadded outputs), max |Δ|
    of the dense vectors, the token weights and the colbert vectors; CheckFailed past `atol`."""
    import torch.nn.functional as F   # torch is export's; the functional API only here

    from bertonnx.runtime.core.pipelines.bge_m3 import colbert_projection, token_weights
    from bertonnx.runtime.core.postprocess import l2_normalize

    from .parity import run_ort, session

    heads = read_heads(folder, record, folder)
    wc, bc, ws, bs = (torch.from_numpy(t) for t in heads.tensors().values())
    sess = session(graph)
    worst = {"dense_vecs": 0.0, "token_weights": 0.0, "colbert_vecs": 0.0}
    for case in reference.cases:
        got = run_ort(sess, *case.inputs)[0]                                      # (B, T, H)
        for i, path in case.files[0]:   # each row's unpadded positions (right padding)
            ref = torch.from_numpy(np.load(path))                                 # (n, H)
            g = got[i, :len(ref)]
            pairs = (("dense_vecs", F.normalize(ref[:1], dim=-1), l2_normalize(g[:1])),
                     ("token_weights", torch.relu(F.linear(ref, ws, bs))[:, 0],
                      token_weights(g, heads)),
                     ("colbert_vecs", F.normalize(F.linear(ref[1:], wc, bc), dim=-1),
                      l2_normalize(colbert_projection(g[1:], heads))))
            for name, want, have in pairs:
                d = float(np.abs(want.numpy() - have).max(initial=0.0))
                worst[name] = d if not np.isfinite(d) else max(worst[name], d)
    name, d = max(worst.items(), key=lambda kv: kv[1] if np.isfinite(kv[1]) else np.inf)
    if not (np.isfinite(d) and d <= atol):   # as the graph's own parity refuses
        raise CheckFailed(f"parity failed: BGE-M3's {name} differ by {d:.3g} (> {atol:g}) from "
                          "torch's on the parity grid", "check the export's heads "
                          "(bge_m3_heads.safetensors) against colbert_linear.pt and "
                          "sparse_linear.pt, and export again")
    return {"atol": atol, "max_abs": worst, "passed": True}
