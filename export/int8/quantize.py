"""The int8 conversions of the fused graph: dynamic (the recipes' usual method), MatMulNBits and
static QDQ. Which one runs is the recipe's (recipes.py); the verdict is export/agreement.py's.

Dynamic int8 = onnxruntime's `quantize_dynamic` on the FUSED graph: Attention -> QAttention,
EmbedLayerNormalization -> QEmbedLayerNormalization, MatMul -> DynamicQuantizeLinear +
MatMulInteger. Three things make that work where Optimum's ORTQuantizer fails on its own O2
output ("Unable to find data type for weight_name"):

1. Symbolic shape inference first: ONNX's own inference stops at com.microsoft ops, leaving
   the quantizer without the types of everything after the first fused op.
2. The tied MLM decoder is taken out of the quantizer's hands (export/tied_decoder.py), so
   the word embedding is stored once, as uint8.
3. RoBERTa's EmbedLayerNormalization reads position ids, which QEmbedLayerNormalization cannot:
   it stays fp32, with the decoder tied to its table (stored once, fp32).
4. MPNet's Attention reads an attention_bias (its relative positions), which QAttention cannot:
   the quantizer would drop it silently, so those Attention nodes stay fp32.
"""
from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

from .. import fusion, memory, tied_decoder
from ..attention_bias import ATTENTION_BIAS
from ..graph import save_model, without_weights
from .evidence import default_settings_summary
from .settings import DEFAULT_INT8, Int8Settings

# What a fused BERT graph holds that dynamic int8 helps; not Transpose/Gather, whose "8-bit
# passthrough" quantization would reach the hidden tied decoder.
QUANTIZED_OPS = ("MatMul", "Attention", "EmbedLayerNormalization")


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


def int8(proto: onnx.ModelProto | list, settings: Int8Settings | None = None,
         scratch: Path | None = None, *, attention: bool = True, keep_fp32: tuple = ()
         ) -> tuple[onnx.ModelProto, dict]:
    """Dynamic int8 of the fused graph `proto`; returns the graph and the manifest's settings.
    Given in a box (a list of one), the proto is taken out of it and dropped once its weights
    are in the scratch file: the quantizer then loads its own copy, and a caller that still
    held the fp32 graph would have two sets of fp32 weights in memory at the quantizer's peak
    (all-mpnet-base-v2 2.47 -> 2.08 GB: docs/benchmarks-history.md, "Exports that fit").

    Its files (the graph handed to the quantizer by path, which then writes its shape-inferred
    copy beside it, and the result) go to `scratch` when given: the export's own folder, which
    a later export cleans up after a SIGKILL. Given a proto instead, the quantizer would copy
    it to a folder of its own in /tmp.

    The weights go to that folder once, as external data, and everything before the quantizer
    works on the graph without them (`graph.without_weights`): the caller's proto is left intact
    without a copy, and symbolic shape inference copies only the graph. Measured on a
    bert-base-shaped fill-mask export: the quantizing step's peak RSS 2.8 GB -> see
    docs/benchmarks-history.md."""
    s = settings or DEFAULT_INT8
    with _root_logger_at_error(), tempfile.TemporaryDirectory(prefix="bertonnx-int8-",
                                                              dir=scratch) as d:
        source, out = Path(d) / "fused.onnx", Path(d) / "int8.onnx"
        if isinstance(proto, list):
            proto = proto.pop()
        light = without_weights(proto, Path(d) / "fused.onnx.data")
        del proto  # the caller's only reference, when it came in a box
        memory.release()
        fp32 = _positioned_embeddings(light, Path(d))  # left fp32, with the decoder tied to them
        biased = _biased_attention(light)  # left fp32
        tied = tied_decoder.hide(light)
        light = SymbolicShapeInference.infer_shapes(light, auto_merge=True)
        onnx.save_model(light, str(source))  # reads its weights from fused.onnx.data
        del light
        quantize_dynamic(source, out, per_channel=s.per_channel, reduce_range=s.reduce_range,
                         weight_type=getattr(QuantType, s.weight_type),
                         op_types_to_quantize=[op for op in QUANTIZED_OPS
                                               if attention or op != "Attention"],
                         nodes_to_exclude=[*tied_decoder.NODES, *fp32, *biased, *keep_fp32],
                         extra_options={"MatMulConstBOnly": True})
        q = onnx.load(str(out))
    fusion.unfuse_bias_gelu(q)  # lets onnxruntime fold the bias into the int8 MatMul
    if tied is not None and fp32:
        tied_decoder.unhide(q)
    elif tied is not None:
        tied_decoder.retie(q, tied)
    info = {"mode": "int8", "method": "onnxruntime.quantization.quantize_dynamic (fused graph)",
            **asdict(s), "activations": "uint8, dynamic per tensor",
            "embeddings": "QEmbedLayerNormalization, uint8 per tensor",
            "evidence": default_settings_summary()}
    if fp32:
        info["embeddings"] = ("fp32 EmbedLayerNormalization: its position ids (RoBERTa's, "
                              "MPNet's) have no QEmbedLayerNormalization input")
    if biased:
        info["attention"] = ("fp32 Attention: its attention_bias (MPNet's relative positions) "
                             "has no QAttention input")
    if tied is not None:
        info["tied_decoder"] = ("fp32 Gemm on the embedding's fp32 table (stored once)" if fp32
                                else "MatMulInteger on the embedding's uint8 table (stored once)")
    return q, info


def _biased_attention(proto: onnx.ModelProto) -> list[str]:
    """Attention nodes that read an attention_bias (export/attention_bias.py): QAttention has
    no such input, so quantizing them would drop the bias."""
    return [n.name for n in proto.graph.node if n.op_type == "Attention"
            and len(n.input) > ATTENTION_BIAS and n.input[ATTENTION_BIAS]]


def _positioned_embeddings(proto: onnx.ModelProto, base_dir: Path | None = None) -> list[str]:
    """EmbedLayerNormalization nodes fed position ids other than 0, 1, ... (RoBERTa's: see
    export/fusion.py). Their int8 form, QEmbedLayerNormalization, has no position_ids input:
    onnxruntime's quantizer drops it and positions would silently restart at 0, so these are
    left fp32. DistilBERT's position ids, a slice of arange, lose nothing and are quantized."""
    g = proto.graph
    producer = {o: n for n in g.node for o in n.output}
    return [n.name for n in g.node if n.op_type == "EmbedLayerNormalization"
            and len(n.input) > 8 and n.input[8]
            and not _counts_from_zero(g, producer, n.input[8], base_dir)]


def _counts_from_zero(g, producer: dict, name: str, base_dir: Path | None) -> bool:
    """Is `name` (through Casts) a Slice of a constant arange from start 0?"""
    node = producer.get(name)
    while node is not None and node.op_type == "Cast":
        node = producer.get(node.input[0])
    if node is None or node.op_type != "Slice":
        return False
    data = _constant(g, producer, node.input[0], base_dir)
    start = _constant(g, producer, node.input[1], base_dir)
    return (data is not None and start is not None and data.ndim == 2 and data.shape[0] == 1
            and np.array_equal(data[0], np.arange(data.shape[1])) and not start.any())


def _constant(g, producer: dict, name: str, base_dir: Path | None = None):
    for init in g.initializer:
        if init.name == name:
            return numpy_helper.to_array(init, base_dir=str(base_dir or ""))
    node = producer.get(name)
    if node is not None and node.op_type == "Constant":
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def int8_nbits(proto: onnx.ModelProto, block_size: int = 32) -> tuple[onnx.ModelProto, dict]:
    """MatMulNBits with 8-bit symmetric blockwise weights and int8 compute (accuracy_level 4)
    for the fused graph's MatMuls; Attention, the embedding and the decoder (a Gemm) stay
    fp32. Needs onnx_ir (onnxruntime's weight-only quantizer imports it)."""
    # lazy: only this recipe needs it, and it imports onnx_ir (0.3 s), which nothing else does
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                 MatMulNBitsQuantizer)

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True,
                                          accuracy_level=4, bits=8)
    q = MatMulNBitsQuantizer(onnx.ModelProto.FromString(proto.SerializeToString()),
                             algo_config=config)
    with _root_logger_at_error():
        q.process()
    return q.model.model, {"mode": "int8", "method": "onnxruntime MatMulNBits (8-bit weights)",
                           "block_size": block_size, "accuracy_level": 4,
                           "activations": "int8, quantized per block at run time"}


def int8_static(proto: onnx.ModelProto, feeds: list[dict], settings: Int8Settings,
                scratch: Path | None = None) -> tuple[onnx.ModelProto, dict]:
    """Static int8 (QDQ) of the fused graph's MatMuls: activation ranges calibrated (min/max)
    on `feeds`, real sentences; Attention and the embedding stay fp32."""
    wanted = {i.name for i in proto.graph.input}

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.rows = iter([{k: v for k, v in f.items() if k in wanted} for f in feeds])

        def get_next(self):
            return next(self.rows, None)

    proto = SymbolicShapeInference.infer_shapes(
        onnx.ModelProto.FromString(proto.SerializeToString()), auto_merge=True)
    with _root_logger_at_error(), tempfile.TemporaryDirectory(prefix="bertonnx-int8-",
                                                              dir=scratch) as d:
        source, out = Path(d) / "fused.onnx", Path(d) / "int8.onnx"
        save_model(proto, source)
        del proto
        quantize_static(source, out, Reader(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul"], per_channel=settings.per_channel,
                        reduce_range=settings.reduce_range,
                        weight_type=getattr(QuantType, settings.weight_type),
                        activation_type=QuantType.QUInt8,
                        nodes_to_exclude=list(tied_decoder.NODES),
                        extra_options={"MatMulConstBOnly": True})
        q = onnx.load(str(out))
    return q, {"mode": "int8", "method": "onnxruntime.quantization.quantize_static (QDQ)",
               **asdict(settings), "activations": f"uint8, calibrated min/max on "
                                                  f"{len(feeds)} batches of real sentences"}
