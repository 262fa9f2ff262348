"""MPNet's export (tiny random models): its relative-position bias reaches every fused Attention
(export/attention_bias.py) and matters, and int8 keeps those Attention nodes fp32.

tests/export/test_family_export.py runs MPNet through every task (fused-op counts, fp32 parity,
inputs); the real all-mpnet-base-v2 is tests/export/test_mpnet_real.py's.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from bertonnx.build import load_pretrained
from bertonnx.export import ExportOptions, export_model
from bertonnx.export.attention_bias import ATTENTION_BIAS
from bertonnx.export.graph import sample_inputs, save_model
from bertonnx.export.parity import run_ort, session
from bertonnx.runtime.core.contract import FP32_ATOL, MODEL_NAME

from tests.conftest import family_spec, make_checkpoint

EMB = "feature-extraction"


def _attention(proto):
    return [n for n in proto.graph.node if n.op_type in ("Attention", "QAttention")]


def test_every_attention_reads_the_one_relative_bias(tiny_export):
    proto = onnx.load(str(tiny_export(family_spec("mpnet", EMB), parity=True) / MODEL_NAME))
    biases = {n.input[ATTENTION_BIAS] for n in _attention(proto)}
    assert len(_attention(proto)) == 2 and len(biases) == 1  # computed once, for every layer
    assert all(n.input[3] for n in _attention(proto))  # and the padding mask beside it
    made = {o: n for n in proto.graph.node for o in n.output}
    node = made[biases.pop()]
    while node is not None and node.op_type != "Gather":  # Unsqueeze <- Transpose <- Gather
        node = made.get(node.input[0])
    assert node is not None and node.input[0] == "encoder.relative.table.weight"
    assert not {o.name for o in proto.graph.output} - {"last_hidden_state"}  # none left over


def test_without_the_bias_the_graph_misses_the_torch_model(tiny_export, tiny_checkpoint,
                                                           tmp_path):
    """What the parity checks would catch if the bias did not reach the fused graph."""
    name = family_spec("mpnet", EMB)
    folder = tiny_export(name, parity=True)
    proto = onnx.load(str(folder / MODEL_NAME))
    for node in _attention(proto):
        del node.input[ATTENTION_BIAS]
    save_model(proto, tmp_path / "unbiased.onnx")
    model = load_pretrained(tiny_checkpoint(name), EMB)
    ids, mask, tt = sample_inputs(model, 2, 17, lengths=[17, 9])
    want = model(ids, mask).detach().numpy()
    m = mask.numpy().astype(bool)
    kept = run_ort(session(folder / MODEL_NAME), ids, mask, tt)[0]
    dropped = run_ort(session(tmp_path / "unbiased.onnx"), ids, mask, tt)[0]
    assert np.abs(kept - want)[m].max() <= FP32_ATOL
    assert np.abs(dropped - want)[m].max() > 100 * FP32_ATOL


@pytest.mark.parametrize("task", ["fill-mask", "text-classification"])
def test_int8_keeps_the_biased_attention_fp32(tiny_checkpoint, tmp_path, task):
    m = export_model(tiny_checkpoint(family_spec("mpnet", task)), task, tmp_path / task,
                     ExportOptions(quantize="int8"))
    assert m.parity["mode"] == "int8" and m.parity["passed"]
    proto = onnx.load(str(tmp_path / task / MODEL_NAME))
    ops = [n.op_type for n in _attention(proto)]
    assert ops == ["Attention", "Attention"]  # QAttention has no attention_bias input
    assert all(n.input[ATTENTION_BIAS] for n in _attention(proto))
    assert sum(n.op_type == "MatMulInteger" for n in proto.graph.node) >= 6  # the rest is int8
    assert "attention_bias" in m.quantization["attention"]


def test_a_pad_token_id_other_than_1_exports_what_transformers_answers(tmp_path):
    """transformers counts MPNet's positions past id 1 whatever config.pad_token_id says; the
    fused graph of a checkpoint with pad_token_id 0 answers as MPNetModel does, its 0-padded
    rows included (issue 43: the export followed pad_token_id and its parity, graph against our
    own model, passed)."""
    import torch
    import transformers

    from tests.build._compare import padded_batch

    ckpt = make_checkpoint(tmp_path / "ckpt", EMB, model_type="mpnet", pad_token_id=0)
    out = tmp_path / "out"
    assert export_model(ckpt, EMB, out, ExportOptions()).parity["passed"]
    ref = transformers.MPNetModel.from_pretrained(ckpt).eval()
    ids, mask, tt = padded_batch(ref.config.vocab_size, 13, 0, lengths=(13, 9, 2))
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    got = run_ort(session(out / MODEL_NAME), ids, mask, tt)[0]
    m = mask.numpy().astype(bool)
    assert np.abs(got - want)[m].max() <= FP32_ATOL
