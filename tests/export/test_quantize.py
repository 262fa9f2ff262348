"""int8 (dynamic, of the fused graph) and fp16 exports: still fused, quantized, small, agreeing."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from bertonnx.export import ExportOptions, export_model, graph, tied_decoder
from bertonnx.export.int8 import quantize
from bertonnx.export.int8.recipes import RECIPES
from bertonnx.export.int8.settings import DEFAULT_INT8, Int8Settings
from bertonnx.runtime.core.contract import INT8_MIN_AGREEMENT, MODEL_NAME

from tests.conftest import FM, QA, TASK_NAMES
from tests.int8_options import check_openvino_graph, fp32_matmul_extra_bytes, ort_int8

LAYERS = 2  # tests/conftest.py make_checkpoint's num_hidden_layers


# Tasks whose int8 export also writes NNCF's graph for OpenVINO, as users get it (3-4 s a tiny
# export): the heads unlike test_openvino_int8's feature-extraction one — the tied MLM decoder
# and QA's two outputs. The rest make onnxruntime's graph alone, which these tests read.
OPENVINO_INT8 = (FM, QA)


@pytest.fixture(scope="session")
def int8_exports(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    return {t: (root / t, export_model(
        ck, t, root / t, ExportOptions(quantize="int8") if t in OPENVINO_INT8 else ort_int8()))
        for t, ck in ((t, tiny_checkpoint(t)) for t in TASK_NAMES)}


@pytest.mark.parametrize("task", TASK_NAMES)
def test_int8_is_fused_and_quantized(int8_exports, task):
    folder, m = int8_exports[task]
    counts = graph.op_counts(onnx.load(str(folder / MODEL_NAME)))
    assert counts["QAttention"] == LAYERS and "Attention" not in counts
    assert counts["QEmbedLayerNormalization"] == 1
    assert counts["LayerNormalization"] >= 2 * LAYERS and "SkipLayerNormalization" not in counts
    # Every encoder MatMul (attention output, FFN up and down) is integer, plus the heads',
    # but those the recipe leaves fp32: at least its `widest` (the tiny model has no OUTLIER)
    kept = RECIPES[m.quantization["recipe"]].widest
    assert counts["MatMulInteger"] >= 3 * LAYERS - kept
    assert counts.get("MatMul", 0) == kept and "Gemm" not in counts
    assert m.quantization["mode"] == "int8"
    assert m.quantization["weight_type"] == DEFAULT_INT8.weight_type
    assert m.quantization["per_channel"] == DEFAULT_INT8.per_channel
    if task in OPENVINO_INT8:
        check_openvino_graph(folder, m)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_int8_task_agreement(int8_exports, task):
    _, m = int8_exports[task]
    p = m.parity
    assert p["mode"] == "int8" and p["passed"] and p["agreement"] >= INT8_MIN_AGREEMENT
    assert p["examples"] >= 12


def test_int8_size_and_tied_weights(tiny_checkpoint, tmp_path):
    fp32 = export_model(tiny_checkpoint("wide-fill-mask"), "fill-mask", tmp_path / "fp32", ExportOptions(parity=False))
    # Size and layout only: agreement is judged on the tiny exports above and on MiniLM (slow);
    # this model's 4000-word random MLM head has near-tied logits by construction.
    q = export_model(tiny_checkpoint("wide-fill-mask"), "fill-mask", tmp_path / "int8",
                     ort_int8(parity=False))
    ratio = q.quantization["size"]["model_bytes"] / fp32.quantization["size"]["model_bytes"]
    assert q.quantization["size"]["ratio_to_fp32_graph"] == pytest.approx(ratio, abs=1e-3)
    g = onnx.load(str(tmp_path / "int8" / MODEL_NAME)).graph
    extra = fp32_matmul_extra_bytes(tmp_path / "int8" / MODEL_NAME)
    assert extra == 0 or RECIPES[q.quantization["recipe"]].widest
    assert ratio - extra / fp32.quantization["size"]["model_bytes"] <= 0.27
    tables = [i for i in g.initializer if 4000 in i.dims and len(i.dims) == 2]
    assert [(t.data_type, list(t.dims)) for t in tables] == [(onnx.TensorProto.UINT8, [4000, 128])]
    decoder = [n for n in g.node if n.op_type == "MatMulInteger" and n.name.startswith("tied_")]
    qemb = [n for n in g.node if n.op_type == "QEmbedLayerNormalization"]
    assert decoder[0].input[1] == tables[0].name + "_T" and qemb[0].input[2] == tables[0].name


def test_quantizer_would_corrupt_tied_embeddings_without_us(tiny_checkpoint, tmp_path):
    """Why export/tied_decoder.py exists. Left alone, onnxruntime's quantizer mishandles the (V, H)
    table shared by the embeddings and the Gemm decoder: up to 1.2x it transposes it in place
    (the embeddings then read a (H, V) table); 1.32 quantizes a transposed copy for the Gemm,
    so the largest weight is stored twice. Either way the result is not one (V, H) table."""
    from bertonnx.build import load_pretrained
    from bertonnx.export import fusion

    model = load_pretrained(tiny_checkpoint("wide-fill-mask"), "fill-mask")
    graph.export_onnx(model, tmp_path / "raw.onnx", 17)
    fused = fusion.fuse(tmp_path / "raw.onnx", 4, 128)

    def vocab_tables(proto):
        return sorted(list(i.dims) for i in proto.graph.initializer
                      if len(i.dims) == 2 and 4000 in i.dims)

    monkey = tied_decoder.hide
    try:
        tied_decoder.hide = lambda proto: None
        broken, _ = quantize.int8(fused)
    finally:
        tied_decoder.hide = monkey
    assert vocab_tables(broken) in ([[128, 4000]], [[128, 4000], [4000, 128]])
    fixed, _ = quantize.int8(fused)
    assert vocab_tables(fixed) == [[4000, 128]]
    emb = [n for n in fixed.graph.node if n.op_type == "QEmbedLayerNormalization"][0]
    assert {i.name: list(i.dims) for i in fixed.graph.initializer}[emb.input[2]] == [4000, 128]


def test_int8_takes_the_graph_out_of_its_box(tiny_checkpoint, tmp_path):
    """Export hands the fused graph over in a box (a list of one) so that quantize can drop it
    before the quantizer loads its own copy (its memory: docs/benchmarks-history.md): the box
    comes back empty, and the graph is the one a proto given directly makes."""
    from bertonnx.build import load_pretrained
    from bertonnx.export import fusion

    model = load_pretrained(tiny_checkpoint("fill-mask"), "fill-mask")
    graph.export_onnx(model, tmp_path / "raw.onnx", 17)
    fused = fusion.fuse(tmp_path / "raw.onnx", 4, 32)
    box = [onnx.ModelProto.FromString(fused.SerializeToString())]
    boxed, _ = quantize.int8(box)
    assert box == []
    direct, _ = quantize.int8(fused)
    assert boxed.SerializeToString() == direct.SerializeToString()


@pytest.mark.parametrize("settings", [Int8Settings(True, "QUInt8", False),
                                      Int8Settings(False, "QInt8", False)])
def test_other_int8_settings_are_recorded(tiny_checkpoint, tmp_path, settings):
    m = export_model(tiny_checkpoint("text-classification"), "text-classification", tmp_path / "q",
                     ort_int8(int8=settings))
    assert m.parity["passed"]
    assert (m.quantization["per_channel"], m.quantization["weight_type"],
            m.quantization["reduce_range"]) == (settings.per_channel, settings.weight_type,
                                                settings.reduce_range)


def test_fp16_keeps_io_types(tiny_checkpoint, tmp_path):
    m = export_model(tiny_checkpoint("question-answering"), "question-answering", tmp_path / "h",
                     ExportOptions(quantize="fp16"))
    g = onnx.load(str(tmp_path / "h" / MODEL_NAME)).graph
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in g.input)
    assert all(o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for o in g.output)
    big = [i for i in g.initializer if len(i.dims) == 2 and min(i.dims) > 2]
    assert big and all(i.data_type == onnx.TensorProto.FLOAT16 for i in big)
    assert m.quantization["mode"] == "fp16" and m.parity["mode"] == "fp16"
    assert m.fused_ops["Attention"] == LAYERS
    # Figures are reported, not enforced; on a tiny model fp16 still tracks fp32 closely.
    assert all(np.isfinite(v) and v < 0.05 for v in m.parity["rel_max_abs"].values())


def test_int8_leaves_the_root_logger_as_it_was(tiny_checkpoint, tmp_path):
    """The quantizer's advice is silenced for its own call only: after an in-process int8
    export, the caller's warnings (bertonnx's own included) still reach the root handlers."""
    import logging

    from bertonnx.build import load_pretrained
    from bertonnx.export import fusion

    model = load_pretrained(tiny_checkpoint("wide-fill-mask"), "fill-mask")
    graph.export_onnx(model, tmp_path / "raw.onnx", 17)
    fused = fusion.fuse(tmp_path / "raw.onnx", 4, 128)
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    try:
        quantize.int8(fused)
        assert root.level == logging.INFO
    finally:
        root.setLevel(before)
