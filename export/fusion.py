"""Fusion with onnxruntime's transformer optimizer (model_type "bert"), and its checkable outcome.

Graph before / after, per encoder layer:

    MatMul+Add ×3 -> Reshape/Transpose -> MatMul/Div/Add(mask)/Softmax/MatMul -> ...   ==> Attention
    Add(residual) -> LayerNormalization                                               ==> SkipLayerNormalization
    MatMul -> Add(bias) -> Gelu                                                       ==> BiasGelu
    Gather(word)+Gather(pos)+Gather(type) -> LayerNormalization  (once)               ==> EmbedLayerNormalization

`opt_level=1` (the optimizer's default for BERT) runs only onnxruntime's portable basic
rewrites before the Python fusions, so the saved graph holds no CPU- or GPU-specific kernels.
Reference: onnxruntime/python/tools/transformers/onnx_model_bert.py (is_fully_optimized).
Fused Attention reads the mask as per-row lengths, i.e. it assumes RIGHT padding (onnxruntime
issue 18945): the runtime pads right, and parity checks right-padded batches.
"""
from __future__ import annotations

import logging
from pathlib import Path

import onnx

from bertonnx.runtime.errors import CheckFailed

from .graph import op_counts

# The op types whose counts the manifest records (fused ones and the quantized forms).
FUSED_OPS = ("EmbedLayerNormalization", "QEmbedLayerNormalization", "Attention", "QAttention",
             "MultiHeadAttention", "SkipLayerNormalization", "BiasGelu", "FastGelu", "Gelu",
             "LayerNormalization", "DynamicQuantizeMatMul", "MatMulInteger",
             "DynamicQuantizeLinear")


def fused_counts(proto: onnx.ModelProto) -> dict[str, int]:
    counts = op_counts(proto)
    return {op: counts[op] for op in FUSED_OPS if counts.get(op)}


def attention_count(counts: dict[str, int]) -> int:
    return sum(counts.get(op, 0) for op in ("Attention", "QAttention", "MultiHeadAttention"))


def fuse(path: Path, num_heads: int, hidden_size: int) -> onnx.ModelProto:
    """The fused graph of the model at `path` (not written; the caller saves it)."""
    from onnxruntime.transformers.optimizer import optimize_model

    # The optimizer logs every fusion at INFO through its own loggers; keep the CLI quiet.
    for name in ("onnxruntime.transformers", "fusion_base", "onnx_model", "onnx_model_bert"):
        logging.getLogger(name).setLevel(logging.WARNING)
    opt = optimize_model(str(path), model_type="bert", num_heads=num_heads,
                         hidden_size=hidden_size, opt_level=1)
    return opt.model


def check_fused(counts: dict[str, int], layers: int) -> None:
    """A standard BERT must come out fully fused: one attention per layer, one embedding op."""
    att = attention_count(counts)
    if att != layers:
        raise CheckFailed(
            f"fusion incomplete: {att} fused attention ops for {layers} layers ({counts})",
            "the exporter or onnxruntime changed; export with --no-optimize and report it")
    emb = counts.get("EmbedLayerNormalization", 0) + counts.get("QEmbedLayerNormalization", 0)
    if emb != 1:
        raise CheckFailed(f"fusion incomplete: {emb} EmbedLayerNormalization ops ({counts})",
                          "export with --no-optimize and report it")
