"""`bertonnx adopt`: a folder made elsewhere becomes a verified export (export/adopt.py)."""
from __future__ import annotations

import json
import logging
import shutil

import onnx
import pytest

from bertonnx.export.adopt import AdoptOptions, adopt
from bertonnx.export.fusion import attention_count
from bertonnx.export.int8.recipes import TARGETS
from bertonnx.runtime import ArtifactError, CheckFailed, InputError, load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.contract import FP32_ATOL, MODEL_NAME
from bertonnx.runtime.core.manifest import Manifest

from tests.conftest import CLS, EMB, FM, NER, QA, TASK_NAMES, make_foreign_export
from tests.runtime._compare import assert_same

LAYERS = 2  # tests/conftest.py make_checkpoint's num_hidden_layers
CALLS = {
    FM: lambda p: p(["the cat [MASK] on the mat .", "[MASK] dog ran"], top_k=3),
    CLS: lambda p: p(["the cat sat", "paris"], top_k=None),
    QA: lambda p: p(question="where?", context="the cat sat on the mat in paris", top_k=2),
    NER: lambda p: p(["the cat sat in paris"], ignore_labels=[]),
    EMB: lambda p: p(["the cat sat", "paris"]),
}


@pytest.fixture(scope="module")
def foreign(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("made-elsewhere")
    made = {}

    def get(task: str, layout: str = "Optimum"):
        if (task, layout) not in made:
            made[(task, layout)] = make_foreign_export(
                tiny_checkpoint(task), root / f"{task}-{layout}", task, layout=layout)
        return made[(task, layout)]

    return get


@pytest.mark.parametrize("task", TASK_NAMES)
def test_adopted_with_a_reference_is_fused_and_proven(foreign, tiny_checkpoint, ours, tmp_path,
                                                      caplog, task):
    m = adopt(foreign(task), tmp_path / "out", AdoptOptions(reference=tiny_checkpoint(task)))
    assert m.task == task and m.optimized
    assert attention_count(m.fused_ops) == LAYERS
    p = m.parity
    assert p["mode"] == "fp32" and p["passed"] and max(p["max_abs"].values()) <= FP32_ATOL
    assert Manifest.read(tmp_path / "out").files[MODEL_NAME]  # hashed like any export
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        pipe = load(tmp_path / "out")
    assert pipe.folder.foreign is None and "no parity report" not in caplog.text
    assert_same(CALLS[task](pipe), CALLS[task](ours(task)))


def test_a_graph_with_its_weights_in_a_data_file_is_adopted(foreign, tiny_checkpoint, tmp_path):
    # Optimum writes large models as model.onnx + model.onnx_data; the fusion's intermediate
    # graph must take the weights along whatever the source's layout.
    src = tmp_path / "src"
    shutil.copytree(foreign(FM), src)
    g = onnx.load(str(src / MODEL_NAME))
    onnx.save_model(g, str(src / MODEL_NAME), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx_data", size_threshold=0)
    assert (src / "model.onnx_data").stat().st_size > 0
    m = adopt(src, tmp_path / "out", AdoptOptions(reference=tiny_checkpoint(FM)))
    assert m.optimized and attention_count(m.fused_ops) == LAYERS
    assert m.parity["passed"] and max(m.parity["max_abs"].values()) <= FP32_ATOL


def test_without_a_reference_the_manifest_says_so(foreign, tmp_path, capsys):
    rc = main(["adopt", str(foreign(CLS, "transformers.js")), "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "parity: not checked: no --reference was given" in out
    m = Manifest.read(tmp_path / "o")
    assert "passed" not in m.parity and m.exporter == "adopted from transformers.js " \
        "(onnx/model.onnx)"


def test_int8_is_judged_by_agreement(foreign, tiny_checkpoint, tmp_path):
    m = adopt(foreign(CLS), tmp_path / "q", AdoptOptions(quantize="int8",
                                                        reference=tiny_checkpoint(CLS)))
    assert m.quantization["mode"] == "int8" and m.parity["mode"] == "int8"
    assert m.parity["passed"]
    # the folder's tokenizer calibrates this CPU's first recipe (SmoothQuant on VNNI and AMX)
    assert m.quantization["recipe"] == TARGETS[m.quantization["target"]].recipes[0]
    counts = onnx.load(str(tmp_path / "q" / MODEL_NAME))
    assert any(n.op_type == "MatMulInteger" for n in counts.graph.node)


def test_a_graph_quantized_elsewhere_is_kept_and_not_requantized(foreign, tiny_checkpoint,
                                                                 tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = shutil.copytree(foreign(CLS, "transformers.js"), tmp_path / "js")
    quantize_dynamic(src / "onnx" / "model.onnx", src / "onnx" / "model_quantized.onnx",
                     weight_type=QuantType.QInt8)
    (src / "onnx" / "model.onnx").unlink()  # only the quantized graph, as some folders ship
    with pytest.raises(InputError, match="quantized already"):
        adopt(src, tmp_path / "again", AdoptOptions(quantize="int8"))
    m = adopt(src, tmp_path / "kept", AdoptOptions(reference=tiny_checkpoint(CLS)))
    assert m.quantization["mode"] == "unknown" and "MatMulInteger" in m.quantization["ops"]
    assert not m.optimized and m.parity["mode"] == "int8" and m.parity["passed"]
    assert load(tmp_path / "kept")("the cat sat")[0]["label"] in ("negative", "neutral", "positive")


def test_a_wrong_reference_fails_and_leaves_nothing(foreign, tiny_checkpoint, tmp_path):
    with pytest.raises(CheckFailed):
        adopt(foreign(CLS), tmp_path / "bad",
              AdoptOptions(reference=tiny_checkpoint(CLS, seed=1)))
    assert not (tmp_path / "bad").exists()
    assert not list(tmp_path.glob(".bad.partial-*"))


def test_refusals(foreign, tiny_export, tmp_path):
    with pytest.raises(ArtifactError, match="needs no adopting"):
        adopt(tiny_export(CLS), tmp_path / "x")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    with pytest.raises(ArtifactError, match="not empty"):
        adopt(foreign(EMB), busy)
    with pytest.raises(ArtifactError, match="does not fit question-answering"):
        adopt(foreign(CLS), tmp_path / "qa", AdoptOptions(task=QA))


def test_cli_json(foreign, tiny_checkpoint, tmp_path, capsys):
    rc = main(["adopt", str(foreign(EMB)), "--out", str(tmp_path / "e"), "--reference",
               str(tiny_checkpoint(EMB)), "--json"])
    assert rc == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["task"] == EMB and manifest["parity"]["passed"]
