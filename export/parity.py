"""Parity: the exported graph against the scratch torch model it came from.

fp32 (fused or not): every output over the contract's PARITY_SHAPES (batch × sequence), right
padded with random row lengths, compared on unpadded positions only, max |Δ| ≤ FP32_ATOL.
int8: task agreement with the fp32 torch model on real English text (see `agreement`).
fp16: figures reported (it is meant for GPU providers). `per_layer` finds the first encoder layer
whose hidden states part, from torch forward hooks and the graph's LayerNorm outputs.

Each judgement is two steps, so export can hold one model at a time: `*_reference` runs the
torch model and keeps its outputs in files (a `Reference`), then `compare_*` runs the graph
against them. `grid` and `fp16_figures` do both in one call.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from bertonnx.build import Bert
from bertonnx.build.model import EncoderLayer
from bertonnx.runtime.core.contract import (BF16_MIN_MEAN_COSINE, FP16_ATOL, FP32_ATOL,
                                            INPUT_NAMES, PARITY_SHAPES)
from bertonnx.runtime.core.tasks import OUTPUTS, TASKS
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.session import create_session

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


# Below this many tokens a batch runs on one torch thread: measured on a shared 2-core machine,
# torch's 2-thread OpenMP regions took 0.2-1.7 s for grid batches of 1-231 tokens of a
# bert-base (each region waits for a thread a neighbour has descheduled); one thread needs
# tens of ms, and on an idle machine batches this small gain nothing from a second thread.
SMALL_TOKENS = 256


def run_torch(model: Bert, ids, mask, tt, *, threads: int | None = None) -> list[np.ndarray]:
    """The model's outputs as float32 arrays; `threads` (torch's intra-op count) for this
    call only."""
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(threads)
        with torch.no_grad():
            out = model(ids, mask, tt)
    finally:
        torch.set_num_threads(before)
    out = out if isinstance(out, tuple) else (out,)
    return [o.float().numpy() for o in out]


@dataclass(frozen=True)
class Case:
    """One batch the judge runs: its inputs, and where the torch outputs for it are kept."""
    name: str
    inputs: tuple                   # (input_ids, attention_mask, token_type_ids) int64 tensors
    files: tuple[tuple, ...]        # per output: ((row, path), ...); row None = the whole output
    shapes: tuple[tuple, ...]       # each torch output's full shape


@dataclass(frozen=True)
class Reference:
    """The torch model's outputs for a judge's inputs, kept in files.

    Export takes them right after the graph is written and can then drop the torch model, so
    the model, the onnxruntime session and two copies of a (B, T, V) output are never held at
    once: on a bert-base-shaped fill-mask export that held 2.5 GB at parity. Grid references
    keep each batch row's unpadded positions in a file of its own (what is compared), so a
    comparison holds one row of the reference at a time beside the graph's output."""
    task: str
    cases: tuple[Case, ...]
    extra: object = None            # what a judge needs besides (agreement: masks, context)

    def outputs(self, case: Case) -> list[np.ndarray]:
        """Whole outputs (references taken with per_row=False)."""
        return [np.load(files[0][1]) for files in case.files]


def take_reference(model: Bert, cases, folder: Path, *, per_row: bool, extra=None) -> Reference:
    """Run `model` on each (name, inputs) of `cases` and keep its outputs under `folder`:
    whole, or (`per_row`) each batch row's unpadded positions of outputs with a sequence axis."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = []
    for name, inputs in cases:
        ref = run_torch(model, *inputs, threads=1 if inputs[0].numel() < SMALL_TOKENS else None)
        keep = inputs[1].numpy().astype(bool)
        files = []
        for (out, axes), r in zip(OUTPUTS[model.task], ref):
            if per_row and 1 in axes:
                rows = tuple((i, folder / f"{name}-{out}-{i}.npy") for i in range(len(r)))
                for i, path in rows:
                    np.save(path, r[i][keep[i]])
            else:
                rows = ((None, folder / f"{name}-{out}.npy"),)
                np.save(rows[0][1], r)
            files.append(rows)
        kept.append(Case(name, tuple(inputs), tuple(files), tuple(r.shape for r in ref)))
        del ref
    return Reference(model.task, tuple(kept), extra)


def _pairs(rows: tuple, g: np.ndarray, mask: np.ndarray):
    """(reference, graph) arrays to compare, one batch row at a time where the reference was
    kept per row: a (2, 512, 30522) fill-mask output is 125 MB, and whole-batch temporaries
    would triple the export's peak. The reference array is the caller's to overwrite."""
    for i, path in rows:
        if i is None:
            yield np.load(path), g
            continue
        keep = mask[i].astype(bool)
        n = int(keep.sum())
        # right padding: the unpadded positions are a prefix, and a slice is a view
        yield np.load(path), (g[i, :n] if keep[:n].all() else g[i][keep])


def _max_abs(x: np.ndarray, y: np.ndarray) -> float:
    """max |x - y|, computed in x's memory (x is a freshly loaded reference); NaN if any."""
    if not x.size:
        return 0.0
    np.subtract(x, y, out=x, casting="unsafe")
    return float(np.max(np.abs(x, out=x)))


def _nan_first(v: float) -> float:
    """max() key that ranks NaN above everything (np.max keeps a NaN; max() would not)."""
    return float("inf") if v != v else v


# What a reference must share with the export for parity to mean anything: the family, the
# vocabulary and the shapes (the manifest's config records each under these names)
SAME_AS_EXPORT = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                  "num_attention_heads", "max_position_embeddings", "type_vocab_size")


def reference_differences(config: dict, task: str, untrained_head: dict, loaded) -> list[str]:
    """How the `loaded` reference (a LoadedCheckpoint for `task`) differs from the export whose
    manifest records `config` and `untrained_head`: [] when it can be the export's source. A
    reference of another vocabulary or family would otherwise fail deep in onnxruntime (ids
    out of range) or torch, and one of another task compare an untrained head."""
    cfg = loaded.model.config
    differ = [f"{'family' if k == 'model_type' else k} {getattr(cfg, k)!r} (the export's "
              f"{config[k]!r})" for k in SAME_AS_EXPORT
              if k in config and getattr(cfg, k, None) != config[k]]
    options = config.get("head_options", {})
    if options != loaded.model.head_options:  # e.g. SPLADE pooled by sum, not max
        differ.append(f"head {loaded.model.head_options} (the export's {options})")
    labels = config.get("num_labels")
    fixed = TASKS[task].fixed_axis   # a classifier's label axis, sized by num_labels
    if fixed and fixed[1] == "num_labels" and isinstance(labels, int) \
            and len(cfg.id2label) != labels:
        differ.append(f"{len(cfg.id2label)} labels (the export's {labels})")
    if loaded.untrained_head() and not untrained_head:
        made = f"a {loaded.trained_for} checkpoint" if loaded.trained_for else "a checkpoint"
        differ.append(f"{made} without the trained {task} head the export has")
    return differ


def grid_shapes(model: Bert) -> list[tuple[int, int]]:
    """The grid's (batch, sequence) shapes; "max" is the longest the position table covers
    (RoBERTa: max_position_embeddings - pad_token_id - 1)."""
    return [(b, model.config.max_tokens if s == "max" else int(s)) for b, s in PARITY_SHAPES]


def grid_reference(model: Bert, folder: Path, *, seed: int = 0) -> Reference:
    """The torch outputs over the grid's shapes, right padded with random row lengths."""
    cases = [(f"{b}x{s}", sample_inputs(model, b, s, seed=seed + 1000 * b + s))
             for b, s in grid_shapes(model)]
    return take_reference(model, cases, folder, per_row=True)


def compare_grid(reference: Reference, sess, *, atol: float = FP32_ATOL) -> dict:
    """Max |Δ| per output over the grid, unpadded positions only; passed iff each ≤ atol."""
    outputs = OUTPUTS[reference.task]
    worst = {name: 0.0 for name, _ in outputs}
    where = {name: None for name, _ in outputs}
    shapes = []
    for case in reference.cases:
        got = _graph_outputs(sess, reference.task, case)
        mask = case.inputs[1].numpy()
        b, s = mask.shape
        for (name, _), rows, g in zip(outputs, case.files, got):
            d = max((_max_abs(x, y) for x, y in _pairs(rows, g, mask)), default=0.0,
                    key=_nan_first)
            if not np.isfinite(d) or d > worst[name]:
                worst[name], where[name] = d, [b, s]
        shapes.append([b, s])
        del got
    passed = all(np.isfinite(v) and v <= atol for v in worst.values())
    return {"mode": "fp32", "atol": atol, "max_abs": worst, "worst_shape": where,
            "shapes": shapes, "passed": bool(passed)}


def _graph_outputs(sess, task: str, case: Case) -> list[np.ndarray]:
    """The graph's outputs for a case, shapes checked against torch's."""
    got = run_ort(sess, *case.inputs)
    for (name, _), g, shape in zip(OUTPUTS[task], got, case.shapes):
        if g.shape != shape:
            raise ArtifactError(f"output {name} has shape {g.shape} for input "
                                f"({case.name.replace('x', ', ')}); torch gives {shape}",
                                "export the model again")
    return got


def grid(model: Bert, sess, *, atol: float = FP32_ATOL, seed: int = 0) -> dict:
    """The fp32 verdict in one call (reference, then comparison), in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="bertonnx-parity-") as d:
        return compare_grid(grid_reference(model, Path(d), seed=seed), sess, atol=atol)


def compare_fp16(reference: Reference, sess) -> dict:
    """fp16 has no pass/fail here: max |Δ| relative to each output's scale, over the grid."""
    outputs = OUTPUTS[reference.task]
    rel = {name: 0.0 for name, _ in outputs}
    for case in reference.cases:
        got = _graph_outputs(sess, reference.task, case)
        mask = case.inputs[1].numpy()
        for (name, _), rows, g in zip(outputs, case.files, got):
            scale = d = 0.0
            for x, y in _pairs(rows, g, mask):
                if x.size:
                    scale = max(scale, float(x.max()), -float(x.min()))
                    d = max(d, _max_abs(x, y))
            rel[name] = max(rel[name], d / (scale or 1.0))
        del got
    return {"mode": "fp16", "rel_max_abs": rel, "reference_tolerance": FP16_ATOL,
            "within_reference_tolerance": bool(all(v <= FP16_ATOL for v in rel.values()))}


def _cosine_rows(x: np.ndarray) -> np.ndarray:
    """The vectors whose cosines the bf16 gate takes: each row of the last axis; where that
    axis holds one value (a reranker's or a regression's score), the scores of all the rows
    as one vector: a one-value row's cosine is only its sign (a score of 0.3 read as 0.6
    passed; -1e-3 read as 1e-3, near a random head's 0, failed)."""
    x = np.asarray(x, np.float64)
    return x.reshape(1, -1) if x.shape[-1] == 1 else x.reshape(-1, x.shape[-1])


def compare_cosine(reference: Reference, sess, *, gate: float = BF16_MIN_MEAN_COSINE) -> dict:
    """bf16 arithmetic (runtime/core/engines.py): the cosine of each unpadded position's output
    row (the last axis; a whole row of logits for outputs without one; a batch's scores as
    one row, `_cosine_rows`) to torch's, mean and worst over the grid, and max |Δ|, per
    output; passed iff every output's mean >= gate."""
    outputs = OUTPUTS[reference.task]
    sums = {name: [0.0, 0] for name, _ in outputs}
    worst = {name: 1.0 for name, _ in outputs}
    delta = {name: 0.0 for name, _ in outputs}
    for case in reference.cases:
        got = _graph_outputs(sess, reference.task, case)
        mask = case.inputs[1].numpy()
        for (name, _), rows, g in zip(outputs, case.files, got):
            for x, y in _pairs(rows, g, mask):
                if not x.size:
                    continue
                x, y = _cosine_rows(x), _cosine_rows(np.asarray(y).reshape(x.shape))
                delta[name] = max(delta[name], float(np.max(np.abs(x - y))))
                norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
                cos = np.where(norms > 0, (x * y).sum(1) / np.where(norms > 0, norms, 1), 1.0)
                sums[name][0] += float(cos.sum())
                sums[name][1] += len(cos)
                worst[name] = min(worst[name], float(cos.min()))
        del got
    mean = {name: (t / n if n else 1.0) for name, (t, n) in sums.items()}
    passed = all(np.isfinite(v) and v >= gate for v in mean.values())
    return {"mode": "cosine", "gate_mean_cosine": gate, "mean_cosine": mean,
            "min_cosine": worst, "max_abs": delta, "passed": bool(passed)}


def fp16_figures(model: Bert, sess, *, seed: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bertonnx-parity-") as d:
        return compare_fp16(grid_reference(model, Path(d), seed=seed), sess)


# --- per-layer -----------------------------------------------------------------------------

_NORMS = ("LayerNormalization", "SkipLayerNormalization", "EmbedLayerNormalization",
          "QEmbedLayerNormalization", "SkipSimplifiedLayerNormalization")


def layer_tensors(proto: onnx.ModelProto, layers: int, *,
                  pre_norm: bool = False) -> list[str]:
    """Names of [embedding norm, layer 0, ..., layer L-1] outputs in the graph (L applications).

    Both the unoptimised and the fused graph hold, in topological order, one LayerNorm for the
    embeddings and two per post-LN encoder layer (attention, then feed-forward): the second of
    each pair is the layer's output. Heads' LayerNorms come after. A norm of a weight
    (DeBERTa's relative embeddings) holds no hidden state and is passed over. `pre_norm`
    (ModernBERT): the first layer has no attention norm and the stack ends in a final norm, so
    the same positions hold the norm that reads each layer's output (the next layer's attention
    norm, the final norm after the last).
    """
    weights = {i.name for i in proto.graph.initializer}
    norms = [n for n in proto.graph.node if n.op_type in _NORMS and n.input[0] not in weights]
    if len(norms) < 1 + 2 * layers:
        raise ArtifactError(f"graph has {len(norms)} LayerNorms, fewer than a {layers}-layer "
                            "BERT needs", "per-layer parity needs a BERT graph")
    after = [norms[2 + 2 * i] for i in range(layers)]
    return [norms[0].output[0]] + [n.input[0] if pre_norm else n.output[0] for n in after]


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
    proto = onnx.load(str(graph))
    names = layer_schedule(model)
    tensors = layer_tensors(proto, len(names), pre_norm=model.config.family.norm == "pre")
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
