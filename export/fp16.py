"""fp16 = onnxruntime's float16 conversion of the fused graph, inputs int64 and outputs float32
kept (keep_io_types). It is for GPU providers: onnxruntime's CPU provider has few fp16 kernels
and runs it slower than fp32 (casts around every unsupported op). Its row, and how it is judged
(reported, never enforced), is export/precisions.py's.
"""
from __future__ import annotations

import onnx
from onnxruntime.transformers.onnx_model import OnnxModel


def convert(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    """The graph in float16; returns it and the manifest's quantization record."""
    m = OnnxModel(onnx.ModelProto.FromString(proto.SerializeToString()))
    m.convert_float_to_float16(keep_io_types=True)
    return m.model, {"mode": "fp16", "io_types": "inputs int64, outputs float32 (kept)",
                     "intended_providers": ["CUDAExecutionProvider", "DmlExecutionProvider"],
                     "note": "slow on CPU: few fp16 CPU kernels; use int8 or fp32 there"}
