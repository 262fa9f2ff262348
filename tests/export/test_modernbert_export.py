"""ModernBERT exported: every task's graph against our torch model over the contract's parity
grid, which reaches past the local window (tiny models: +-4 tokens, shapes up to 64), with its
attention fused by export/rotary_attention.py into RotaryEmbedding + MultiHeadAttention.

onnxruntime's own optimizer fuses nothing of ModernBERT's attention (its patterns expect BERT's
q/k/v, and its rotary fusion keeps one cos/sin cache where ModernBERT has two bases) and no
embedding op (there are no position or segment tables): its GELUs are all it adds. int8 goes
through the agreement gate like every family's.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from bertonnx.build import load_pretrained
from bertonnx.export import ExportOptions, export_model, fusion, parity
from bertonnx.runtime.core.contract import FP32_ATOL, INPUT_NAMES, MODEL_NAME, output_names
from bertonnx.runtime.core.manifest import Manifest

from tests.conftest import SENTIMENT, TASK_NAMES, family_spec, make_checkpoint

LAYERS = 2  # tests/conftest.py FAMILY_CONFIGS: layer 0 global, layer 1 local


def expected_ops(task: str) -> dict[str, int]:
    """One MultiHeadAttention and two RotaryEmbeddings (q, k) per layer; a GELU per GeGLU;
    norms: the embeddings', layer 1's attention norm (layer 0 has none), each feed-forward's and
    the final one; every head but feature extraction adds its prediction head's GELU and norm."""
    ops = {"MultiHeadAttention": LAYERS, "RotaryEmbedding": 2 * LAYERS, "Gelu": LAYERS,
           "LayerNormalization": 1 + (LAYERS - 1) + LAYERS + 1}
    if task != "feature-extraction":
        ops["Gelu"] += 1
        ops["LayerNormalization"] += 1
    return ops


@pytest.fixture(scope="module")
def exported(tiny_export):
    def get(task: str):
        folder = tiny_export(family_spec("modernbert", task), parity=True)
        return folder, Manifest.read(folder), onnx.load(str(folder / MODEL_NAME))
    return get


@pytest.mark.parametrize("task", TASK_NAMES)
def test_fused_graph_matches_torch_past_the_window(exported, task):
    folder, manifest, proto = exported(task)
    counts = fusion.fused_counts(proto)
    assert counts == manifest.fused_ops == expected_ops(task)
    p = manifest.parity
    assert p["mode"] == "fp32" and p["passed"]
    assert set(p["max_abs"]) == set(output_names(task))
    assert all(0 <= v <= FP32_ATOL for v in p["max_abs"].values()), p["max_abs"]
    cfg = json.loads((folder / "config.json").read_text())
    assert max(s for _, s in p["shapes"]) == cfg["max_position_embeddings"] == 64
    assert cfg["local_attention"] == 8  # so 33 and 64 tokens reach past the window
    assert tuple(i.name for i in proto.graph.input) == INPUT_NAMES[:2]  # no token types
    assert cfg["architectures"] == [manifest.config["architecture"]]


def test_global_and_local_layers_read_their_own_base_and_mask(exported):
    _, _, proto = exported("feature-extraction")
    g = proto.graph
    tables = {i.name: numpy_helper.to_array(i) for i in g.initializer
              if i.name.startswith("rotary_")}
    cos_g, cos_l = tables["rotary_cos_global"], tables["rotary_cos_local"]
    assert cos_g.shape == cos_l.shape == (64, 4)  # max positions x head_dim / 2
    # base 160000 turns slower than base 10000: the two caches differ past position 0
    assert np.array_equal(cos_g[0], cos_l[0]) and not np.allclose(cos_g[1:], cos_l[1:])
    mha = [n for n in g.node if n.op_type == "MultiHeadAttention"]
    rot = {n.output[0]: n.input[2] for n in g.node if n.op_type == "RotaryEmbedding"}
    assert [rot[n.input[0]] for n in mha] == ["rotary_cos_global", "rotary_cos_local"]
    # layer 0 masks keys by attention_mask; layer 1 adds the window's (B, 1, T, T) mask
    assert mha[0].input[4] and len(mha[0].input) == 5
    assert len(mha[1].input) == 6 and mha[1].input[5] and not mha[1].input[4]


def test_tied_decoder_reads_the_token_table_once(exported):
    folder, _, proto = exported("fill-mask")
    g = proto.graph
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    tables = [i.name for i in g.initializer if len(i.dims) == 2 and vocab in i.dims]
    assert len(tables) == 1
    assert [n.op_type for n in g.node if tables[0] in n.input] == ["Gather", "Gemm"]


def test_per_layer_reads_the_pre_norm_residual_stream(exported, tiny_checkpoint):
    """Pre-LN: each layer's output is what the next norm reads, not a norm's output."""
    folder, _, _ = exported("feature-extraction")
    model = load_pretrained(tiny_checkpoint(family_spec("modernbert", "feature-extraction")),
                            "feature-extraction")
    clean = parity.per_layer(model, folder / MODEL_NAME)
    assert clean["first_parting"] is None
    assert [r["where"] for r in clean["layers"]] == ["embeddings", "layer 0", "layer 1"]
    with torch.no_grad():  # the second layer's feed-forward: only layer 1 parts
        w = model.encoder.layers[1].ffn.down.weight
        w.add_(0.05 * torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
    rows = parity.per_layer(model, folder / MODEL_NAME)
    assert rows["first_parting"] == "layer 1"


@pytest.mark.parametrize("optimize", [True, False])
def test_mean_pooling_classifier(tmp_path, optimize):
    ckpt = make_checkpoint(tmp_path / "ckpt", "text-classification", model_type="modernbert",
                           labels=SENTIMENT, classifier_pooling="mean")
    m = export_model(ckpt, "text-classification", tmp_path / "out",
                     ExportOptions(optimize=optimize))
    assert m.parity["passed"] and max(m.parity["max_abs"].values()) <= FP32_ATOL
    assert m.fused_ops.get("MultiHeadAttention", 0) == (LAYERS if optimize else 0)


def test_int8_passes_the_agreement_gate(tiny_checkpoint, tmp_path):
    task = "fill-mask"
    m = export_model(tiny_checkpoint(family_spec("modernbert", task)), task, tmp_path / "q",
                     ExportOptions(quantize="int8"))
    assert m.parity["mode"] == "int8" and m.parity["passed"]
    assert m.fused_ops["MultiHeadAttention"] == LAYERS
    assert m.fused_ops["MatMulInteger"] >= 4 * LAYERS  # qkv, out, Wi, Wo of every layer
