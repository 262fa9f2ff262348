"""Parity: the exported graph against the scratch torch model it came from.

fp32 (fused or not): every output over the shape grid PARITY_BATCHES × PARITY_SEQUENCES, right
padded with random row lengths, compared on unpadded positions only, max |Δ| ≤ FP32_ATOL.
int8: task agreement with the fp32 torch model on real English text (see `agreement`).
fp16: figures reported (it is meant for GPU providers). `per_layer` finds the first encoder layer
whose hidden states part, from torch forward hooks and the graph's LayerNorm outputs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch

from bertonnx.build import Bert
from bertonnx.runtime.contract import (FP16_ATOL, FP32_ATOL, INPUT_NAMES, OUTPUTS,
                                       PARITY_BATCHES, PARITY_SEQUENCES)
from bertonnx.runtime.errors import ArtifactError
from bertonnx.runtime.session import create_session

from .graph import sample_inputs


def session(model: str | Path | bytes):
    """A CPU session for parity checks, from runtime's factory with the arena off: the arena
    keeps its high-water mark, and at batch 7 x 512 a fill-mask graph's (B, T, 30522) logits
    would stay reserved through the rest of the export."""
    return create_session(model, memory_arena=False).inner


def run_ort(sess, ids, mask, tt, outputs=None) -> list[np.ndarray]:
    """The graph's outputs, fed the inputs it declares (token_type_ids only where it has them)."""
    feed = dict(zip(INPUT_NAMES, (ids, mask, tt)))
    wanted = {i.name for i in sess.get_inputs()}
    return sess.run(outputs, {k: v.numpy() for k, v in feed.items() if k in wanted})


def run_torch(model: Bert, ids, mask, tt) -> list[np.ndarray]:
    with torch.no_grad():
        out = model(ids, mask, tt)
    out = out if isinstance(out, tuple) else (out,)
    return [o.float().numpy() for o in out]


def _unpadded(a: np.ndarray, mask: np.ndarray, axes: dict) -> np.ndarray:
    """The entries at real (unpadded) positions; outputs without a sequence axis as they are."""
    return a[mask.astype(bool)] if 1 in axes else a


def _max_abs_diff(r: np.ndarray, g: np.ndarray, mask: np.ndarray, axes: dict) -> float:
    """max |r - g| over unpadded positions, one batch row at a time: a (7, 512, 30522)
    fill-mask output is 437 MB, and whole-batch temporaries would triple the export's peak."""
    if not r.size:
        return 0.0
    if 1 not in axes:
        return float(np.max(np.abs(r - g.astype(np.float32))))
    per_row = [float(np.max(np.abs(r[i][keep] - g[i][keep].astype(np.float32))))
               for i, keep in enumerate(mask.astype(bool)) if keep.any()]
    return float(np.max(per_row)) if per_row else 0.0  # np.max keeps a NaN


def seq_grid(model: Bert) -> list[int]:
    """The grid's sequence lengths; "max" is the longest the position table covers (RoBERTa:
    max_position_embeddings - pad_token_id - 1)."""
    return [model.config.max_tokens if s == "max" else int(s) for s in PARITY_SEQUENCES]


def grid(model: Bert, sess, *, atol: float = FP32_ATOL, seed: int = 0) -> dict:
    """Max |Δ| per output over the whole shape grid; passed iff every one is ≤ atol."""
    outputs = OUTPUTS[model.task]
    worst = {name: 0.0 for name, _ in outputs}
    where = {name: None for name, _ in outputs}
    shapes = []
    for b in PARITY_BATCHES:
        for s in seq_grid(model):
            ids, mask, tt = sample_inputs(model, b, s, seed=seed + 1000 * b + s)
            ref, got = run_torch(model, ids, mask, tt), run_ort(sess, ids, mask, tt)
            for (name, axes), r, g in zip(outputs, ref, got):
                if r.shape != g.shape:
                    raise ArtifactError(f"output {name} has shape {g.shape} for input ({b}, {s}); "
                                        f"torch gives {r.shape}", "export the model again")
                d = _max_abs_diff(r, g, mask.numpy(), axes)
                if not np.isfinite(d) or d > worst[name]:
                    worst[name], where[name] = d, [b, s]
            shapes.append([b, s])
    passed = all(np.isfinite(v) and v <= atol for v in worst.values())
    return {"mode": "fp32", "atol": atol, "max_abs": worst, "worst_shape": where,
            "shapes": shapes, "passed": bool(passed)}


def fp16_figures(model: Bert, sess, *, seed: int = 0) -> dict:
    """fp16 has no pass/fail here: max |Δ| relative to each output's scale, over the grid."""
    outputs = OUTPUTS[model.task]
    rel = {name: 0.0 for name, _ in outputs}
    for b in PARITY_BATCHES:
        for s in seq_grid(model):
            ids, mask, tt = sample_inputs(model, b, s, seed=seed + 1000 * b + s)
            ref, got = run_torch(model, ids, mask, tt), run_ort(sess, ids, mask, tt)
            for (name, axes), r, g in zip(outputs, ref, got):
                m = mask.numpy()
                r, g = _unpadded(r, m, axes), _unpadded(g, m, axes).astype(np.float32)
                scale = float(np.max(np.abs(r))) or 1.0
                rel[name] = max(rel[name], float(np.max(np.abs(r - g))) / scale)
    return {"mode": "fp16", "rel_max_abs": rel, "reference_tolerance": FP16_ATOL,
            "within_reference_tolerance": bool(all(v <= FP16_ATOL for v in rel.values()))}


# --- per-layer -----------------------------------------------------------------------------

_NORMS = ("LayerNormalization", "SkipLayerNormalization", "EmbedLayerNormalization",
          "QEmbedLayerNormalization", "SkipSimplifiedLayerNormalization")


def layer_tensors(proto: onnx.ModelProto, layers: int) -> list[str]:
    """Names of [embedding norm, layer 0, ..., layer L-1] outputs in the graph (L applications).

    Both the unoptimised and the fused graph hold, in topological order, one LayerNorm for the
    embeddings and two per post-LN encoder layer (attention, then feed-forward): the second of
    each pair is the layer's output. Heads' LayerNorms come after.
    """
    norms = [n.output[0] for n in proto.graph.node if n.op_type in _NORMS]
    if len(norms) < 1 + 2 * layers:
        raise ArtifactError(f"graph has {len(norms)} LayerNorms, fewer than a {layers}-layer "
                            "BERT needs", "per-layer parity needs a BERT graph")
    return [norms[0]] + [norms[2 + 2 * i] for i in range(layers)]


def layer_schedule(model: Bert) -> list[str]:
    """The name of each layer application, in the order the graph runs them: "layer i", and for
    ALBERT's shared layers also the layer that runs ("layer 3 (group 0.0)")."""
    c = model.config
    if not c.family.shared_layers:
        return [f"layer {i}" for i in range(c.num_hidden_layers)]
    runs = [(g, j) for g in c.layer_schedule for j in range(c.inner_group_num)]
    return [f"layer {i} (group {g}.{j})" for i, (g, j) in enumerate(runs)]


def per_layer(model: Bert, graph: Path, *, batch: int = 2, seq: int = 11, seed: int = 0) -> dict:
    """Max |Δ| of the hidden states after the embedding norm and after each layer application;
    the first one past atol.

    Torch side: forward hooks on the embedding LayerNorm (ELECTRA and ALBERT project after it)
    and on every encoder layer, which fire once per call, so ALBERT's shared layers report each
    application in the order they run."""
    from bertonnx.build.model import EncoderLayer

    proto = onnx.load(str(graph))
    names = layer_schedule(model)
    tensors = layer_tensors(proto, len(names))
    elem = onnx.TensorProto.FLOAT16 if any(
        i.data_type == onnx.TensorProto.FLOAT16 for i in proto.graph.initializer) else onnx.TensorProto.FLOAT
    have = {o.name for o in proto.graph.output}
    for n in tensors:
        if n not in have:
            proto.graph.output.append(onnx.helper.make_tensor_value_info(n, elem, None))
    sess = session(proto.SerializeToString())
    ids, mask, tt = sample_inputs(model, batch, seq, seed=seed)
    got = run_ort(sess, ids, mask, tt, outputs=tensors)

    captured = []
    layers = [m for m in model.encoder.modules() if isinstance(m, EncoderLayer)]
    hooks = [m.register_forward_hook(lambda m, a, o: captured.append(o))
             for m in [model.encoder.embeddings.norm, *layers]]
    try:
        run_torch(model, ids, mask, tt)
    finally:
        for h in hooks:
            h.remove()
    m = mask.numpy().astype(bool)
    rows, first = [], None
    for name, t, g in zip(["embeddings", *names], captured, got, strict=True):
        d = float(np.max(np.abs(t.numpy()[m] - g.astype(np.float32)[m])))
        rows.append({"where": name, "max_abs": d})
        if first is None and not d <= FP32_ATOL:
            first = name
    return {"atol": FP32_ATOL, "layers": rows, "first_parting": first}
