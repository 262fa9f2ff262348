"""DeBERTa-v2/v3's graph, beyond the family grid (tests/export/test_family_export.py runs fused
ops, parity and inputs for every task of the v3-shaped tiny model):

- relative positions are made in the graph from the sequence length: one Range, a small int64
  index table, no float arithmetic on positions, so any length runs — past the position
  table too — and matches the torch model;
- v2's shape (absolute positions, token types, embedding projection, separate position
  projections) exports with token_type_ids and passes parity;
- the tied word table is stored once, read by the embedding Gather and the decoder Gemm;
- int8 passes its agreement gate although no attention is fused.

Why nothing fuses into Attention: onnxruntime's transformer optimizer (1.32) has no pattern
for disentangled attention (no model_type in optimizer.MODEL_TYPES names it, and its BERT
pattern needs Q·Kᵀ + mask -> Softmax with nothing else added); see deberta_ops there.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.numpy_helper
import torch

from bertonnx.build import load_pretrained
from bertonnx.export import ExportOptions, export_model
from bertonnx.export.graph import op_counts
from bertonnx.runtime.core.contract import FP32_ATOL, INPUT_NAMES, MODEL_NAME
from bertonnx.runtime.core.manifest import Manifest
from bertonnx.runtime.core.session import create_session

from tests.conftest import SENTIMENT, family_spec, make_checkpoint
from tests.export.test_family_export import deberta_ops

DEBERTA = "deberta-v2"
LAYERS = 2


def test_relative_positions_are_made_in_the_graph_for_any_length(tiny_checkpoint, tiny_export):
    name = family_spec(DEBERTA, "feature-extraction")
    folder = tiny_export(name)
    g = onnx.load(str(folder / MODEL_NAME)).graph
    ops = op_counts(onnx.load(str(folder / MODEL_NAME)))
    assert ops["Range"] == 1  # once per forward, shared by every layer
    assert ops["GatherElements"] == 2 * LAYERS  # c2p and p2c in each layer
    assert not {"Log", "Ceil", "Sign"} & set(ops)  # the buckets are a constant table
    # the distance -> row table, a constant the Gather after the clamped distances reads
    constants = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t)
                 for n in g.node if n.op_type == "Constant" and n.attribute[0].type ==
                 onnx.AttributeProto.TENSOR}
    gathered = [constants[n.input[0]] for n in g.node
                if n.op_type == "Gather" and n.input[0] in constants]
    tables = [t for t in gathered if t.ndim == 1 and t.dtype == np.int64 and len(t) > 16]
    # 2 * reach + 1 rows: the buckets settle on the edge by the 64th distance
    assert len(tables) == 1 and len(tables[0]) <= 2 * 64 + 1
    assert tables[0][0] == 0 and tables[0][-1] == 2 * 16 - 1  # the table's two edges

    model = load_pretrained(tiny_checkpoint(name), "feature-extraction")
    sess = create_session(folder / MODEL_NAME)
    g = torch.Generator().manual_seed(0)
    for T in (3, 150):  # 150: past the 64-position table
        ids = torch.randint(5, model.config.vocab_size, (2, T), generator=g)
        mask = torch.ones_like(ids)
        mask[1, T // 2:] = 0
        with torch.no_grad():
            want = model(ids, attention_mask=mask).numpy()
        got = sess.run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[
            "last_hidden_state"]
        m = mask.numpy().astype(bool)
        assert np.abs(got[m] - want[m]).max() <= FP32_ATOL


def test_v2_shape_exports_with_token_types(tmp_path):
    config = dict(position_biased_input=True, type_vocab_size=2, embedding_size=16,
                  share_att_key=False)
    ckpt = make_checkpoint(tmp_path / "v2", "text-classification", model_type=DEBERTA,
                           labels=SENTIMENT, **config)
    manifest = export_model(ckpt, "text-classification", tmp_path / "out")
    assert manifest.parity["passed"] and tuple(manifest.inputs) == INPUT_NAMES
    assert manifest.fused_ops == deberta_ops("text-classification", LAYERS)
    assert not {"Attention", "EmbedLayerNormalization"} & set(manifest.fused_ops)


def test_tied_word_table_stored_once(tiny_export):
    folder = tiny_export(family_spec(DEBERTA, "fill-mask"))
    g = onnx.load(str(folder / MODEL_NAME)).graph
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    tables = [i.name for i in g.initializer if len(i.dims) == 2 and vocab in i.dims]
    assert len(tables) == 1
    readers = sorted(n.op_type for n in g.node if tables[0] in n.input)
    assert readers == ["Gather", "Gemm"]  # the embeddings and the decoder


def test_int8_passes_the_agreement_gate(tiny_checkpoint, tmp_path):
    manifest = export_model(tiny_checkpoint(family_spec(DEBERTA, "text-classification")),
                            "text-classification", tmp_path / "q",
                            ExportOptions(quantize="int8"))
    assert manifest.parity["mode"] == "int8" and manifest.parity["passed"]
    # every Linear of the layers quantized: q, k, v, out, up, down
    assert manifest.fused_ops["MatMulInteger"] >= 6 * LAYERS
    assert Manifest.read(tmp_path / "q").quantization["mode"] == "int8"
