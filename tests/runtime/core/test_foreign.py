"""ONNX folders made by other tools (runtime/core/foreign.py): served as they are, with a warning.

The stand-in for another tool is transformers' own model traced by torch.onnx.export, as
Optimum does (tests/conftest.py make_foreign_export); the real Optimum export of MiniLM is
checked in test_optimum_export_of_minilm_answers_as_ours when optimum-onnx is installed.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import ArtifactError, ConfigError, TaskMismatchError, load
from bertonnx.runtime.core.contract import task_of_architectures
from bertonnx.runtime.triton.repository import write_repository

from tests.conftest import CLS, EMB, FM, NER, QA, TASK_NAMES, make_foreign_export

from tests.runtime._compare import assert_same

TEXTS = ["the cat sat on the mat .", "paris", "a dog ran to the river in paris and the cat sat"]
CALLS = {
    FM: lambda p: p(["the cat [MASK] on the mat .", "[MASK] dog ran"], top_k=3),
    CLS: lambda p: p(TEXTS, top_k=None),
    QA: lambda p: p(question=["where?", "who sat?"], context=TEXTS[2], top_k=2),
    NER: lambda p: p(TEXTS, aggregation_strategy="simple", ignore_labels=[]),
    EMB: lambda p: p(TEXTS),
}


@pytest.fixture(scope="module")
def foreign(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("foreign")
    made = {}

    def get(task: str, layout: str = "Optimum", **kw):
        key = (task, layout, tuple(sorted(kw.items())))
        if key not in made:
            made[key] = make_foreign_export(tiny_checkpoint(task), root / f"{len(made)}", task,
                                            layout=layout, **kw)
        return made[key]

    return get


@pytest.mark.parametrize("task", TASK_NAMES)
@pytest.mark.parametrize("layout", ["Optimum", "transformers.js"])
def test_answers_equal_bertonnx_export_of_the_same_checkpoint(foreign, ours, task, layout):
    pipe = load(foreign(task, layout))
    assert pipe.task == task  # from config.json's architectures
    assert_same(CALLS[task](pipe), CALLS[task](ours(task)))


def test_graph_without_token_type_ids(foreign, ours):
    """DistilBERT- and RoBERTa-shaped graphs take no token_type_ids: fed only what they take."""
    pipe = load(foreign(CLS, inputs=("input_ids", "attention_mask")))
    assert pipe.session.input_names == ("input_ids", "attention_mask")
    assert_same(pipe(TEXTS, top_k=None), ours(CLS)(TEXTS, top_k=None))


def test_says_once_that_nothing_vouches_for_it(foreign, caplog, tmp_path):
    folder = shutil.copytree(foreign(EMB), tmp_path / "copy")
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(folder)
        load(folder)
    said = [r.getMessage() for r in caplog.records if "no parity report" in r.getMessage()]
    assert len(said) == 1 and "Optimum layout" in said[0] and "bertonnx adopt" in said[0]


def test_cli_serves_it(foreign, ours):
    folder = foreign(CLS)
    r = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "classify", str(folder),
                        "the cat sat", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert_same(json.loads(r.stdout), ours(CLS)("the cat sat"))
    assert "no parity report" in r.stderr


def test_task_from_argument_when_config_names_none(foreign, ours, tmp_path):
    folder = shutil.copytree(foreign(NER), tmp_path / "f")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["architectures"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="names no architectures"):
        load(folder)
    pipe = load(folder, task="ner")
    assert_same(pipe("the cat sat", ignore_labels=[]), ours(NER)("the cat sat", ignore_labels=[]))


def test_graph_that_does_not_fit_the_task(foreign, tmp_path):
    # a classifier's graph said to be a QA model: its outputs are not QA's
    with pytest.raises(ArtifactError, match="does not fit question-answering: no output start_logits"):
        load(foreign(CLS), task="question-answering")
    # config.json says fill-mask; asking for classification is the same mismatch, named
    folder = shutil.copytree(foreign(FM), tmp_path / "fm")
    with pytest.raises(ArtifactError, match="does not fit text-classification: logits has 3 axes, not 2"):
        load(folder, task="text-classification")


def test_graph_with_inputs_the_runtime_does_not_make(tmp_path, foreign):
    folder = shutil.copytree(foreign(EMB), tmp_path / "f")
    proto = onnx.load(str(folder / "model.onnx"))
    proto.graph.input[2].name = "position_ids"
    for node in proto.graph.node:
        node.input[:] = ["position_ids" if i == "token_type_ids" else i for i in node.input]
    onnx.save(proto, str(folder / "model.onnx"))
    with pytest.raises(ArtifactError, match="takes inputs .*position_ids"):
        load(folder)


def test_folder_without_config_or_graph(foreign, tmp_path):
    folder = shutil.copytree(foreign(EMB), tmp_path / "f")
    (folder / "config.json").unlink()
    with pytest.raises(ArtifactError, match="no config.json"):
        load(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match="has no bertonnx.json"):
        load(empty)


def test_a_bertonnx_export_is_never_read_as_foreign(tiny_export):
    # its model.onnx would match the Optimum layout; the manifest decides
    assert load(tiny_export(CLS)).folder.foreign is None


def test_mismatch_with_an_explicit_task_of_a_bertonnx_export(tiny_export):
    with pytest.raises(TaskMismatchError):
        load(tiny_export(CLS), task="fill-mask")


@pytest.mark.parametrize("arches, task", [
    (["BertForMaskedLM"], FM), (["BertForPreTraining"], FM), (["RobertaForMaskedLM"], FM),
    (["DistilBertForSequenceClassification"], CLS), (["XLMRobertaForTokenClassification"], NER),
    (["AlbertForQuestionAnswering"], QA), (["BertModel"], EMB), (["RobertaModel"], EMB),
    (["ElectraForPreTraining"], EMB), (["BertLMHeadModel"], None), (["DebertaModel"], None),
    ([], None), (None, None),
    (["BertForMaskedLM", "BertModel"], None),
])
def test_task_of_architectures(arches, task):
    assert task_of_architectures(arches) == task


@pytest.mark.slow
def test_optimum_export_of_minilm_answers_as_ours(minilm_dir, tmp_path):
    """The real thing: `optimum-cli export onnx` of the bundled MiniLM, served by bertonnx,
    against bertonnx's own export of the same checkpoint."""
    pytest.importorskip("optimum.exporters.onnx")
    from optimum.exporters.onnx import main_export  # optional (the test extra): skipped without

    # with sentence-transformers installed Optimum would export the folder as a
    # SentenceTransformer (outputs token_embeddings, sentence_embedding): ask for its encoder
    main_export(str(minilm_dir), output=tmp_path / "optimum", task="feature-extraction",
                opset=17, device="cpu", library_name="transformers")
    export_model(minilm_dir, EMB, tmp_path / "ours", ExportOptions(parity=False))
    texts = ["A man is playing a guitar.", "The new movie is awesome.", "paris"] * 3
    theirs = np.asarray(load(tmp_path / "optimum")(texts, pooling="mean", normalize=True))
    mine = np.asarray(load(tmp_path / "ours")(texts, pooling="mean", normalize=True))
    assert np.abs(theirs - mine).max() < 1e-4


def test_triton_repository_wants_an_adopted_folder(foreign, tmp_path):
    with pytest.raises(ArtifactError, match="made elsewhere .*bertonnx adopt"):
        write_repository(foreign(CLS), tmp_path / "repo")
