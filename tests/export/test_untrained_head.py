"""A head the checkpoint did not train for the task (runtime/core/untrained.py): export refuses
it in one line unless `--allow-untrained-head`, the manifest records which weights, and `load()`
and `serve` warn once per folder."""
from __future__ import annotations

import json
import logging

import pytest

from bertonnx.build import load_checkpoint
from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core import once
from bertonnx.runtime.core.errors import UntrainedHeadError
from bertonnx.runtime.core.manifest import Manifest

QA_HEAD = ["qa_outputs.bias", "qa_outputs.weight"]


def _export(args, capsys):
    rc = main(["export", *map(str, args), "--no-parity"])
    return rc, capsys.readouterr().err


def _warnings(caplog, needle="--allow-untrained-head"):
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and needle in r.getMessage()]


def test_encoder_exported_for_qa_is_refused_in_one_line(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "qa"
    rc, err = _export([tiny_checkpoint("feature-extraction"), "--task", "question-answering",
                       "--out", out], capsys)
    lines = [line for line in err.splitlines() if not line.startswith("bertonnx: loading")]
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "has no trained question-answering head" in lines[0]
    assert "qa_outputs.bias, qa_outputs.weight were initialised at random" in lines[0]
    assert "pass --allow-untrained-head if you mean to fine-tune it, or export a checkpoint " \
           "trained for question-answering" in lines[0]
    assert not out.exists()


def test_allowed_untrained_head_is_recorded_and_warned_once_at_load_and_serve(
        tiny_checkpoint, tmp_path, capsys, caplog, monkeypatch):
    out = tmp_path / "qa"
    rc, _ = _export([tiny_checkpoint("feature-extraction"), "--task", "question-answering",
                     "--out", out, "--allow-untrained-head"], capsys)
    assert rc == 0
    assert [w for w in _warnings(caplog) if w.startswith("exporting with")]  # export says so
    assert Manifest.read(out).untrained_head == {"initialised": QA_HEAD}
    caplog.clear()
    monkeypatch.setattr(once, "_given", set())
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
        load(out)
    warned = _warnings(caplog)
    assert len(warned) == 1 and "\n" not in warned[0], warned
    assert "question-answering head weights qa_outputs.bias, qa_outputs.weight were " \
           "initialised at random" in warned[0] and "until the head is fine-tuned" in warned[0]

    # serve: the app's startup loads the export, and says so once
    from tests.runtime.server._helpers import TestClient, wait_ready
    from bertonnx.runtime.server import create_app

    monkeypatch.setattr(once, "_given", set())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        with TestClient(create_app(out)) as client:
            wait_ready(client, timeout=60)
            r = client.post("/predict", json={"inputs": {"question": "who?",
                                                         "context": "a b c"}})
            assert r.status_code == 200
    assert len(_warnings(caplog)) == 1


def test_sequence_classifier_exported_for_tokens_is_refused_then_recorded(
        tiny_checkpoint, tmp_path, capsys, caplog, monkeypatch):
    src = tiny_checkpoint("text-classification")
    rc, err = _export([src, "--task", "token-classification", "--out", tmp_path / "a"], capsys)
    assert rc == 2 and "Traceback" not in err
    assert "its token-classification head is the checkpoint's text-classification head " \
           "(classifier.bias, classifier.weight)" in err and "--allow-untrained-head" in err
    out = tmp_path / "b"
    rc, _ = _export([src, "--task", "token-classification", "--out", out,
                     "--allow-untrained-head"], capsys)
    assert rc == 0
    assert Manifest.read(out).untrained_head == {
        "trained_for": "text-classification",
        "other_task": ["classifier.bias", "classifier.weight"]}
    caplog.clear()
    monkeypatch.setattr(once, "_given", set())
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
    assert len(_warnings(caplog)) == 1


def test_a_trained_head_records_nothing_and_warns_nothing(tiny_export, caplog, monkeypatch):
    folder = tiny_export("question-answering")
    assert Manifest.read(folder).untrained_head == {}
    monkeypatch.setattr(once, "_given", set())
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(folder)
    assert not _warnings(caplog, "untrained") and not _warnings(caplog)


def test_a_manifest_without_the_field_still_loads(tiny_export, tmp_path):
    import shutil

    folder = tmp_path / "old"
    shutil.copytree(tiny_export("text-classification"), folder)
    path = folder / "bertonnx.json"
    data = json.loads(path.read_text())
    data.pop("untrained_head", None)
    path.write_text(json.dumps(data))
    assert Manifest.read(folder).untrained_head == {}
    load(folder)


def test_a_head_trained_in_memory_after_load_exports(tiny_checkpoint, tmp_path):
    import torch

    loaded = load_checkpoint(tiny_checkpoint("feature-extraction"), "question-answering")
    with pytest.raises(UntrainedHeadError, match="--allow-untrained-head"):
        export_model(loaded, "question-answering", tmp_path / "a", ExportOptions(parity=False))
    with torch.no_grad():  # what fine-tuning does to the head, in one step
        loaded.model.head.qa.weight.add_(0.01)
    m = export_model(loaded, "question-answering", tmp_path / "b", ExportOptions(parity=False))
    assert m.untrained_head == {}
