"""Export of every task on tiny random checkpoints: fusion, dynamic axes, parity, folder rules."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

from bertonnx.export import ExportOptions, export_model
from bertonnx.export import fusion, graph, parity
from bertonnx.runtime.core.contract import (FP32_ATOL, INPUT_NAMES, MANIFEST_NAME, MODEL_NAME,
                                       PARITY_SHAPES, output_names)
from bertonnx.runtime.core.errors import ArtifactError, CheckFailed, TaskMismatchError
from bertonnx.runtime.core.manifest import Manifest

from tests.conftest import SENTIMENT, TASK_NAMES

LAYERS = 2  # tests/conftest.py make_checkpoint's num_hidden_layers


def exported(tiny_export, task: str) -> tuple:
    """(folder, manifest) of the shared tiny export of `task` made with parity on."""
    folder = tiny_export(task, parity=True)
    return folder, Manifest.read(folder)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_fused_op_counts(tiny_export, task):
    folder, manifest = exported(tiny_export, task)
    counts = fusion.fused_counts(onnx.load(str(folder / MODEL_NAME)))
    assert counts == manifest.fused_ops
    mlm = task == "fill-mask"
    # STYLE.md rule 7: what "fully fused" means for a post-LN BERT of LAYERS layers.
    assert counts["Attention"] == LAYERS
    assert counts["EmbedLayerNormalization"] == 1
    # the residual norms stay Add + LayerNormalization (export/fusion.py), plus the MLM head's
    assert "SkipLayerNormalization" not in counts
    assert counts["LayerNormalization"] == 2 * LAYERS + mlm
    assert counts["BiasGelu"] == LAYERS + mlm


@pytest.mark.parametrize("task", TASK_NAMES)
def test_parity_over_the_shape_grid(tiny_export, task):
    _, manifest = exported(tiny_export, task)
    p = manifest.parity
    assert p["mode"] == "fp32" and p["passed"]
    assert set(p["max_abs"]) == set(output_names(task))
    assert all(0 <= v <= FP32_ATOL for v in p["max_abs"].values())
    assert sorted(map(tuple, p["shapes"])) == sorted((b, 64 if s == "max" else s)
                                                     for b, s in PARITY_SHAPES)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_graph_io_is_dynamic(tiny_export, task):
    folder, _ = exported(tiny_export, task)
    g = onnx.load(str(folder / MODEL_NAME)).graph
    assert [i.name for i in g.input] == list(INPUT_NAMES)
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in g.input)
    assert [o.name for o in g.output] == list(output_names(task))
    for v in list(g.input) + list(g.output):
        dims = v.type.tensor_type.shape.dim
        assert dims[0].dim_param and not dims[0].dim_value, v.name
        if len(dims) > 2 or v in g.input or task != "text-classification":
            assert dims[1].dim_param and not dims[1].dim_value, v.name


@pytest.mark.parametrize("batch,seq", [(3, 1), (1, 64), (5, 17), (4, 2)])
def test_shapes_never_seen_at_export_run(tiny_export, tiny_checkpoint, batch, seq):
    """Shapes the export never used (batch 3/5, odd lengths) run and agree with torch."""
    from bertonnx.build import load_pretrained

    folder, _ = exported(tiny_export, "question-answering")
    model = load_pretrained(tiny_checkpoint("question-answering"), "question-answering")
    ids, mask, tt = graph.sample_inputs(model, batch, seq, seed=7)
    got = parity.run_ort(parity.session(folder / MODEL_NAME), ids, mask, tt)
    ref = parity.run_torch(model, ids, mask, tt)
    m = mask.numpy().astype(bool)
    for r, g in zip(ref, got):
        assert g.shape == (batch, seq)
        assert np.max(np.abs(r[m] - g[m])) <= FP32_ATOL


def test_export_sequence_length_is_unlike_any_dimension(tiny_checkpoint):
    from bertonnx.build import load_pretrained

    m = load_pretrained(tiny_checkpoint("text-classification"), "text-classification")
    c, t = m.config, graph.export_seq_len(m)
    assert t > 1 and graph.EXPORT_BATCH >= 2
    assert t not in {graph.EXPORT_BATCH, c.num_attention_heads, c.head_dim, c.hidden_size,
                     c.intermediate_size, c.vocab_size, c.num_labels, c.num_hidden_layers}


def test_folder_contents_and_manifest(tiny_export, tiny_checkpoint):
    folder, manifest = exported(tiny_export, "text-classification")
    names = {p.name for p in folder.iterdir()}
    assert {MODEL_NAME, MANIFEST_NAME, "config.json", "vocab.txt", "tokenizer.json"} <= names
    # the weights in one external data file beside the graph (mapped by onnxruntime)
    assert [n for n in names if n.endswith(".data")] == [MODEL_NAME + ".data"]
    # readable by whoever may read the graph (onnx alone writes the data file 0600)
    mode = (folder / MODEL_NAME).stat().st_mode & 0o777
    assert (folder / (MODEL_NAME + ".data")).stat().st_mode & 0o777 == mode
    data = onnx.load(str(folder / MODEL_NAME), load_external_data=False)
    big = [t for t in data.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert big and all(dict((e.key, e.value) for e in t.external_data)["location"]
                       == MODEL_NAME + ".data" for t in big)
    read = Manifest.read(folder)  # verifies every sha256
    assert set(read.files) == names - {MANIFEST_NAME}
    assert read.task == "text-classification" and read.opset == 17 and read.optimized
    assert read.exporter == graph.EXPORTER and read.quantization["mode"] == "none"
    assert read.inputs["input_ids"] == {"dtype": "int64", "axes": {"0": "batch", "1": "sequence"}}
    assert read.outputs["logits"]["axes"] == {"0": "batch"}
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["id2label"] == {str(k): v for k, v in SENTIMENT.items()}
    assert read.config["id2label"] == cfg["id2label"]
    assert (folder / "vocab.txt").read_bytes() == (tiny_checkpoint("text-classification")
                                                   / "vocab.txt").read_bytes()
    assert {"torch", "onnx", "onnxruntime"} <= set(read.versions)


def test_tied_weights_stored_once(tiny_checkpoint, tmp_path):
    from bertonnx.build import load_pretrained

    m = export_model(tiny_checkpoint("wide-fill-mask"), "fill-mask", tmp_path / "fm", ExportOptions(parity=False))
    size = m.quantization["size"]
    model = load_pretrained(tiny_checkpoint("wide-fill-mask"), "fill-mask")
    assert size["unique_param_bytes"] == graph.unique_param_bytes(model)
    assert size["model_bytes"] <= 1.03 * size["unique_param_bytes"]
    g = onnx.load(str(tmp_path / "fm" / MODEL_NAME)).graph
    vocab = model.config.vocab_size
    assert sum(vocab in i.dims and len(i.dims) == 2 for i in g.initializer) == 1


def test_unoptimized_export(tiny_checkpoint, tmp_path):
    m = export_model(tiny_checkpoint("fill-mask"), "fill-mask", tmp_path / "raw",
                     ExportOptions(optimize=False))
    assert not m.optimized and m.parity["passed"]
    assert fusion.attention_count(m.fused_ops) == 0
    assert m.fused_ops.get("LayerNormalization") == 2 * LAYERS + 2  # embeddings + head too


def test_refuses_non_empty_target_unless_forced(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="not empty"):
        export_model(tiny_checkpoint("feature-extraction"), "feature-extraction", out)
    assert (out / "keep.txt").read_text() == "mine"
    export_model(tiny_checkpoint("feature-extraction"), "feature-extraction", out,
                 ExportOptions(force=True, parity=False))
    assert not (out / "keep.txt").exists() and (out / MANIFEST_NAME).is_file()


@pytest.mark.parametrize("where", ["fuse", "parity"])
def test_interrupted_export_leaves_nothing(tiny_checkpoint, tmp_path, monkeypatch, where):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(fusion if where == "fuse" else parity,
                        "fuse" if where == "fuse" else "compare_grid", boom)
    with pytest.raises(KeyboardInterrupt):
        export_model(tiny_checkpoint("feature-extraction"), "feature-extraction", tmp_path / "out")
    assert os.listdir(tmp_path) == []  # neither `out` nor its hidden temp sibling


def test_lost_fusion_fails_the_export(tiny_checkpoint, tmp_path, monkeypatch):
    # The day the exporter's graph stops matching onnxruntime's patterns, export must fail.
    monkeypatch.setattr(fusion, "fuse", lambda path, *a, **k: onnx.load(str(path)))
    with pytest.raises(CheckFailed, match="fusion incomplete: 0 fused attention ops for 2"):
        export_model(tiny_checkpoint("fill-mask"), "fill-mask", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_parity_failure_fails_the_export(tiny_checkpoint, tmp_path, monkeypatch):
    real = parity.compare_grid
    monkeypatch.setattr(parity, "compare_grid", lambda r, s, **k: real(r, s, atol=0.0))
    with pytest.raises(CheckFailed, match="parity failed"):
        export_model(tiny_checkpoint("fill-mask"), "fill-mask", tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_task_mismatch_and_bad_options(tiny_checkpoint, tmp_path):
    from bertonnx.build import load_pretrained
    from bertonnx.runtime.core.errors import InputError

    model = load_pretrained(tiny_checkpoint("fill-mask"), "fill-mask")
    with pytest.raises(TaskMismatchError):
        export_model(model, "question-answering", tmp_path / "x")
    with pytest.raises(InputError):
        ExportOptions(quantize="int4")
    with pytest.raises(InputError):
        ExportOptions(quantize="int8", optimize=False)


def test_in_memory_model_needs_a_tokenizer(tiny_checkpoint, tmp_path):
    from bertonnx.build import load_pretrained

    model = load_pretrained(tiny_checkpoint("feature-extraction"), "feature-extraction")
    with pytest.raises(ArtifactError, match="tokenizer"):  # a bare model knows no folder
        export_model(model, "feature-extraction", tmp_path / "a")
    m = export_model(model, "feature-extraction", tmp_path / "b",
                     ExportOptions(tokenizer=tiny_checkpoint("feature-extraction"), parity=False))
    assert "vocab.txt" in m.files
