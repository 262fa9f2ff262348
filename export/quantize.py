"""int8 (dynamic, of the fused graph) and fp16 conversions, and int8's task-agreement check.

int8 = onnxruntime's `quantize_dynamic` on the FUSED graph: Attention -> QAttention,
EmbedLayerNormalization -> QEmbedLayerNormalization, MatMul -> DynamicQuantizeLinear +
MatMulInteger. Two things make that work where Optimum's ORTQuantizer fails on its own O2
output ("Unable to find data type for weight_name"):

1. Symbolic shape inference first: ONNX's own inference stops at com.microsoft ops, leaving
   the quantizer without the types of everything after the first fused op.
2. The tied MLM decoder is taken out of the quantizer's hands. The quantizer rewrites every
   Gemm(transB=1) as MatMul by transposing B *in place* ("assume B is not used by any other
   node"), which silently transposes the word embedding that EmbedLayerNormalization also
   reads. We hide the decoder from it (a MatMul on a Transpose node, excluded by name), then point the decoder at the same uint8 embedding QEmbedLayerNormalization
   holds. The word embedding is stored once, as uint8:

       h ──DynamicQuantizeLinear──> h_q, s_h, z_h
       W_q (V, H) uint8 ──Transpose──> (H, V)        (folded once at session load)
       MatMulInteger(h_q, W_qᵀ, z_h, z_W) ─Cast─ × (s_h · s_W) ─ + bias ──> logits

   QEmbedLayerNormalization quantizes its tables per tensor to uint8, so the decoder is per
   tensor uint8 whatever `Int8Settings` says; the settings govern every other weight.

fp16 = onnxruntime's float16 conversion of the fused graph, inputs int64 and outputs float32
kept (keep_io_types). It is for GPU providers: onnxruntime's CPU provider has few fp16 kernels
and runs it slower than fp32 (casts around every unsupported op).
"""
from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper

from bertonnx.build import Bert
from bertonnx.runtime.contract import INT8_MIN_AGREEMENT
from bertonnx.runtime.errors import ArtifactError, CheckFailed, InputError

from .parity import run_ort, run_torch
from .texts import QA_PAIRS, SENTENCES

WEIGHT_TYPES = ("QInt8", "QUInt8")
# What a fused BERT graph holds that dynamic int8 helps; not Transpose/Gather, whose "8-bit
# passthrough" quantization would reach the hidden tied decoder.
QUANTIZED_OPS = ("MatMul", "Attention", "EmbedLayerNormalization")


@dataclass(frozen=True)
class Int8Settings:
    per_channel: bool = False
    weight_type: str = "QUInt8"
    reduce_range: bool = False

    def __post_init__(self):
        if self.weight_type not in WEIGHT_TYPES:
            raise InputError(f"unknown int8 weight type {self.weight_type!r}",
                             f"use one of {', '.join(WEIGHT_TYPES)}")


# Chosen by `python -m bertonnx.export.int8_study` on this CPU (AVX2, no VNNI), MiniLM-L6 with a
# sentiment head fitted on 600 real tweets, judged on 400 held-out ones, all graphs timed in one
# round-robin loop (b=8, s=128, onnxruntime default threads, 2 shared cores):
#                        argmax agree  accuracy  MLM top-1*  ms (fp32 435.5)
#   per-tensor  QUInt8       0.963       0.677     0.517       414.8
#   per-channel QUInt8       0.975       0.667     0.670       415.3
#   per-tensor  QInt8        0.938       0.677     0.253       358.4
#   per-channel QInt8        0.970       0.670     0.600       352.1
#   per-tensor  QInt8 rr     0.917       0.670     0.010       353.7
#   per-channel QInt8 rr     0.963       0.682     0.575       354.0   <- chosen
# (fp32 torch accuracy 0.667; * untrained MLM head, a worst case.) QInt8 weights take MLAS's
# u8s8 kernels, ~15% faster than u8u8 here. Without VNNI those kernels sum uint8×int8 pairs in
# int16 (vpmaddubsw) and saturate on full-range weights: on the tiny test models QInt8 without
# reduce_range has 10× the embedding error of either fix (cosine 0.99925 vs 0.99994). 7-bit
# weights (reduce_range) remove it at no speed cost; per-channel recovers what 7 bits lose.
# per-channel QUInt8 is the most accurate but gives back nearly all of int8's speed here.
DEFAULT_INT8 = Int8Settings(per_channel=True, weight_type="QInt8", reduce_range=True)
EVIDENCE = ("int8_study on MiniLM-L6 + fitted sentiment head, 400 held-out tweets, b8 s128 on "
            "AVX2 without VNNI: per-channel QInt8 reduce_range argmax agreement 0.963 (best: "
            "per-channel QUInt8 0.975), accuracy 0.682 vs fp32 0.667, 354 ms vs fp32 436 ms "
            "and per-channel QUInt8 415 ms; reduce_range avoids u8s8 int16 saturation")


# --- int8 ----------------------------------------------------------------------------------

def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _hide_tied_decoder(proto: onnx.ModelProto) -> str | None:
    """Gemm(h, W, b, transB=1) on the embedding W -> MatMul(h, Transpose(W)) + b. Returns W.

    Left visible, the quantizer either transposes the shared W in place (onnxruntime up to 1.2x)
    or stores a transposed int8 copy for the Gemm (1.32); hidden, W is quantized once, for
    QEmbedLayerNormalization, and _retie_decoder points the decoder at that table."""
    g = proto.graph
    embed_w = {n.input[2] for n in g.node if n.op_type == "EmbedLayerNormalization"}
    for i, n in enumerate(g.node):
        if (n.op_type == "Gemm" and n.input[1] in embed_w and _attr(n, "transB", 0) == 1
                and _attr(n, "transA", 0) == 0 and _attr(n, "alpha", 1.0) == 1.0
                and _attr(n, "beta", 1.0) == 1.0):
            w, out = n.input[1], n.output[0]
            new = [helper.make_node("Transpose", [w], [w + "_tied_T"], perm=[1, 0],
                                    name="tied_decoder_Transpose"),
                   helper.make_node("MatMul", [n.input[0], w + "_tied_T"],
                                    [out + ("_mm" if len(n.input) > 2 else "")],
                                    name="tied_decoder_MatMul")]
            if len(n.input) > 2:
                new.append(helper.make_node("Add", [out + "_mm", n.input[2]], [out],
                                            name="tied_decoder_Add"))
            del g.node[i]
            for j, m in enumerate(new):
                g.node.insert(i + j, m)
            return w
    return None


def _retie_decoder(proto: onnx.ModelProto, w: str) -> None:
    """Point the hidden decoder at QEmbedLayerNormalization's uint8 W; drop the fp32 W."""
    g = proto.graph
    qemb = [n for n in g.node if n.op_type == "QEmbedLayerNormalization"]
    if len(qemb) != 1:
        raise CheckFailed("int8: the embeddings were not quantized (no QEmbedLayerNormalization)",
                          "export without --quantize int8 and report it")
    wq, ws, wz = qemb[0].input[2], qemb[0].input[8], qemb[0].input[13]
    idx = {n.name: i for i, n in enumerate(g.node)}
    mm = g.node[idx["tied_decoder_MatMul"]]
    h, out = mm.input[0], mm.output[0]
    new = [
        helper.make_node("Transpose", [wq], [wq + "_T"], perm=[1, 0], name="tied_decoder_TransposeQ"),
        helper.make_node("DynamicQuantizeLinear", [h], [h + "_q", h + "_s", h + "_z"],
                         name="tied_decoder_QuantizeInput"),
        helper.make_node("MatMulInteger", [h + "_q", wq + "_T", h + "_z", wz], [out + "_i32"],
                         name="tied_decoder_MatMulInteger"),
        helper.make_node("Cast", [out + "_i32"], [out + "_f32"], to=onnx.TensorProto.FLOAT,
                         name="tied_decoder_Cast"),
        helper.make_node("Mul", [h + "_s", ws], [out + "_scale"], name="tied_decoder_Scale"),
        helper.make_node("Mul", [out + "_f32", out + "_scale"], [out], name="tied_decoder_Rescale"),
    ]
    at = min(idx["tied_decoder_Transpose"], idx["tied_decoder_MatMul"])
    keep = [n for n in g.node if n.name not in ("tied_decoder_Transpose", "tied_decoder_MatMul")]
    del g.node[:]
    g.node.extend(keep[:at] + new + keep[at:])
    used = {i for n in g.node for i in n.input}
    for init in list(g.initializer):
        if init.name == w and w not in used:
            g.initializer.remove(init)


@contextmanager
def _root_logger_at_error():
    """The quantizer logs a pre-processing advice on the root logger at WARNING on every call;
    it does not apply to an already fused graph (pre-processing would undo nothing and fuse
    nothing more). Silenced for the call only: the caller's logging is theirs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def int8(proto: onnx.ModelProto, settings: Int8Settings | None = None
         ) -> tuple[onnx.ModelProto, dict]:
    """Dynamic int8 of the fused graph `proto`; returns the graph and the manifest's settings."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    s = settings or DEFAULT_INT8
    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # leave the caller's intact
    tied = _hide_tied_decoder(proto)
    proto = SymbolicShapeInference.infer_shapes(proto, auto_merge=True)
    with _root_logger_at_error(), tempfile.TemporaryDirectory(prefix="bertonnx-int8-") as d:
        out = Path(d) / "int8.onnx"
        quantize_dynamic(proto, out, per_channel=s.per_channel, reduce_range=s.reduce_range,
                         weight_type=getattr(QuantType, s.weight_type),
                         op_types_to_quantize=list(QUANTIZED_OPS),
                         nodes_to_exclude=["tied_decoder_Transpose", "tied_decoder_MatMul"],
                         extra_options={"MatMulConstBOnly": True})
        q = onnx.load(str(out))
    if tied is not None:
        _retie_decoder(q, tied)
    info = {"mode": "int8", "method": "onnxruntime.quantization.quantize_dynamic (fused graph)",
            **asdict(s), "activations": "uint8, dynamic per tensor",
            "embeddings": "QEmbedLayerNormalization, uint8 per tensor",
            "evidence": EVIDENCE}
    if tied is not None:
        info["tied_decoder"] = "MatMulInteger on the embedding's uint8 table (stored once)"
    return q, info


# --- fp16 ----------------------------------------------------------------------------------

def fp16(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    from onnxruntime.transformers.onnx_model import OnnxModel

    m = OnnxModel(onnx.ModelProto.FromString(proto.SerializeToString()))
    m.convert_float_to_float16(keep_io_types=True)
    return m.model, {"mode": "fp16", "io_types": "inputs int64, outputs float32 (kept)",
                     "intended_providers": ["CUDAExecutionProvider", "DmlExecutionProvider"],
                     "note": "slow on CPU: few fp16 CPU kernels; use int8 or fp32 there"}


# --- task agreement on real text -----------------------------------------------------------

def encode(tokenizer, texts, pairs=None, max_len: int = 512):
    """Right-padded (input_ids, attention_mask, token_type_ids) int64 tensors."""
    encs = tokenizer.encode_batch(list(texts), list(pairs) if pairs is not None else None)
    T = min(max(len(e.ids) for e in encs), max_len)
    ids = torch.full((len(encs), T), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(encs), T), dtype=torch.long)
    tt = torch.zeros((len(encs), T), dtype=torch.long)
    for i, e in enumerate(encs):
        n = min(len(e.ids), T)
        ids[i, :n] = torch.tensor(e.ids[:n])
        mask[i, :n] = 1
        tt[i, :n] = torch.tensor(e.type_ids[:n])
    return ids, mask, tt, encs


def _mask_one_word(tokenizer, ids, encs):
    """Mask the middle whole word of each row; returns the masked positions."""
    if tokenizer.mask_token_id is None:
        raise ArtifactError("the tokenizer has no mask token", "fill-mask needs a [MASK] token")
    positions = []
    for i, e in enumerate(encs):
        words = [j for j, t in enumerate(e.tokens)
                 if 0 < j < len(e.tokens) - 1 and t.isalpha() and not t.startswith("##")
                 and not (j + 1 < len(e.tokens) and e.tokens[j + 1].startswith("##"))]
        j = words[len(words) // 2] if words else 1
        ids[i, j] = tokenizer.mask_token_id
        positions.append(j)
    return positions


def task_metrics(task: str, ref: list[np.ndarray], got: list[np.ndarray], mask: np.ndarray,
                 extra) -> dict:
    """Agreement between reference (fp32) and candidate outputs; the first key is the verdict."""
    if task == "fill-mask":
        rows = np.arange(len(extra))
        r, g = ref[0][rows, extra], got[0][rows, extra]  # (N, V) at the masked positions
        r5, g5 = np.argsort(-r, 1)[:, :5], np.argsort(-g, 1)[:, :5]
        overlap = [len(set(a) & set(b)) / 5 for a, b in zip(r5, g5)]
        return {"top1": float(np.mean(r5[:, 0] == g5[:, 0])), "top5_overlap": float(np.mean(overlap))}
    if task == "text-classification":
        return {"argmax": float(np.mean(ref[0].argmax(-1) == got[0].argmax(-1)))}
    if task == "token-classification":
        m = mask.astype(bool)
        return {"token_argmax": float(np.mean(ref[0].argmax(-1)[m] == got[0].argmax(-1)[m]))}
    if task == "question-answering":
        spans_r, spans_g = best_spans(ref, extra), best_spans(got, extra)
        return {"span": float(np.mean([a == b for a, b in zip(spans_r, spans_g)]))}
    # feature-extraction: which other sentence is nearest, by mean-pooled cosine
    m = mask[..., None].astype(np.float32)
    ea, eb = [(o * m).sum(1) / m.sum(1) for o in (ref[0], got[0])]
    ea, eb = [e / np.linalg.norm(e, axis=1, keepdims=True) for e in (ea, eb)]
    sa, sb = ea @ ea.T, eb @ eb.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    cos = (ea * eb).sum(1)
    return {"nearest_neighbour": float(np.mean(sa.argmax(1) == sb.argmax(1))),
            "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}


def best_spans(outputs: list[np.ndarray], context: np.ndarray, max_len: int = 30) -> list:
    """(start, end) maximising start+end logits within the context, end >= start."""
    start, end = outputs
    spans = []
    for s, e, c in zip(start, end, context):
        s, e = np.where(c, s, -np.inf), np.where(c, e, -np.inf)
        score = s[:, None] + e[None, :]
        T = len(s)
        band = np.triu(np.ones((T, T), bool)) & ~np.triu(np.ones((T, T), bool), max_len)
        score = np.where(band, score, -np.inf)
        spans.append(tuple(int(x) for x in np.unravel_index(np.argmax(score), score.shape)))
    return spans


def task_batch(task: str, tokenizer, max_len: int, texts=None, pairs=None):
    """Inputs for `task` from real text, and what the metric needs (mask positions, context)."""
    if task == "question-answering":
        qs, cs = zip(*(pairs or QA_PAIRS))
        ids, mask, tt, encs = encode(tokenizer, qs, cs, max_len)
        context = ((tt == 1) & (mask == 1) & (ids != tokenizer.sep_token_id)).numpy()
        return (ids, mask, tt), context
    ids, mask, tt, encs = encode(tokenizer, texts or SENTENCES, None, max_len)
    extra = _mask_one_word(tokenizer, ids, encs) if task == "fill-mask" else None
    return (ids, mask, tt), extra


def agreement(model: Bert, sess, tokenizer, *, texts=None, pairs=None) -> dict:
    """int8 verdict: task agreement of the graph with the fp32 torch model on real text."""
    if tokenizer is None:
        raise ArtifactError("int8 parity needs the tokenizer", "export with tokenizer files")
    (ids, mask, tt), extra = task_batch(model.task, tokenizer,
                                        model.config.max_position_embeddings, texts, pairs)
    ref, got = run_torch(model, ids, mask, tt), run_ort(sess, ids, mask, tt)
    metrics = task_metrics(model.task, ref, got, mask.numpy(), extra)
    verdict = next(iter(metrics.values()))
    return {"mode": "int8", "metrics": metrics, "agreement": verdict,
            "min_agreement": INT8_MIN_AGREEMENT, "examples": int(ids.shape[0]),
            "reference": "fp32 torch model", "passed": bool(verdict >= INT8_MIN_AGREEMENT)}
