"""The real all-MiniLM-L6-v2: fill-mask and text-classification, fp32 and int8 (slow)."""
from __future__ import annotations

import onnx
import pytest

from bertonnx.export import ExportOptions, export_model, graph
from bertonnx.runtime.contract import FP32_ATOL, INT8_MIN_AGREEMENT, MODEL_NAME

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("task", ["fill-mask", "text-classification"])
def test_minilm_fp32_and_int8(minilm_dir, tmp_path, task):
    fp32 = export_model(minilm_dir, task, tmp_path / "fp32")
    assert fp32.parity["passed"]
    assert all(v <= FP32_ATOL for v in fp32.parity["max_abs"].values())
    assert fp32.fused_ops["Attention"] == 6 and fp32.fused_ops["EmbedLayerNormalization"] == 1
    assert fp32.fused_ops["SkipLayerNormalization"] == 12
    size = fp32.quantization["size"]
    assert size["model_bytes"] <= 1.03 * size["unique_param_bytes"]

    q = export_model(minilm_dir, task, tmp_path / "int8", ExportOptions(quantize="int8"))
    assert q.parity["passed"] and q.parity["agreement"] >= INT8_MIN_AGREEMENT
    counts = graph.op_counts(onnx.load(str(tmp_path / "int8" / MODEL_NAME)))
    assert counts["QAttention"] == 6 and counts["MatMulInteger"] >= 18
    assert q.quantization["size"]["model_bytes"] <= 0.27 * size["model_bytes"]
