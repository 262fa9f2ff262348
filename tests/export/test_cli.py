"""`bertonnx export` and `bertonnx parity` from the command line, including the failing exit."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from bertonnx.runtime.cli import main
from bertonnx.runtime.core.contract import FP32_ATOL
from bertonnx.export.engines import JUDGES
from bertonnx.runtime.core.engines import installed


def test_export_json_prints_the_manifest(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["export", str(tiny_checkpoint("token-classification")), "--task",
               "token-classification", "--out", str(out), "--json"])
    cap = capsys.readouterr()
    assert rc == 0
    manifest = json.loads(cap.out)
    assert manifest["task"] == "token-classification" and manifest["parity"]["passed"]
    assert "fusing" in cap.err  # progress on stderr, stdout stays parseable


def test_export_refuses_non_empty_out_in_one_line(tiny_export, tiny_checkpoint, capsys):
    folder = tiny_export("feature-extraction", parity=True)
    rc = main(["export", str(tiny_checkpoint("feature-extraction")), "--task", "feature-extraction",
               "--out", str(folder)])
    err = capsys.readouterr().err
    assert rc == 2 and "not empty" in err and "--force" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def perturbed(tiny_checkpoint, tmp_path_factory):
    """The fill-mask checkpoint with layer 1's FFN output weight nudged by 1e-2."""
    from safetensors.torch import load_file, save_file

    src = tiny_checkpoint("fill-mask")
    dst = tmp_path_factory.mktemp("perturbed") / "fm"
    shutil.copytree(src, dst)
    state = load_file(dst / "model.safetensors")
    key = "bert.encoder.layer.1.output.dense.weight"
    state[key] = state[key] + 1e-2 * torch.randn(state[key].shape,
                                                 generator=torch.Generator().manual_seed(0))
    save_file(state, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_parity_passes_against_its_reference(tiny_export, tiny_checkpoint, capsys):
    folder = tiny_export("fill-mask", parity=True)
    assert main(["parity", str(folder), "--reference", str(tiny_checkpoint("fill-mask"))]) == 0
    out = capsys.readouterr().out
    assert out.startswith("parity fp32:") and "PASS" in out.splitlines()[0]
    # and a line per other engine (runtime/core/engines.py) where its extra is installed (bf16
    # says "not measured" on a CPU without bf16 arithmetic)
    others = list(JUDGES) if installed("openvino") else []
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in out.splitlines()[1:]] == \
        [f"parity {k}" for k in others]


def test_parity_exits_1_against_a_perturbed_reference(tiny_export, perturbed, capsys):
    folder = tiny_export("fill-mask", parity=True)
    rc = main(["parity", str(folder), "--reference", str(perturbed), "--json", "--per-layer"])
    cap = capsys.readouterr()
    assert rc == 1 and "outside tolerance" in cap.err
    report = json.loads(cap.out)
    assert not report["passed"] and report["max_abs"]["logits"] > FP32_ATOL
    rows = {r["where"]: r["max_abs"] for r in report["per_layer"]["layers"]}
    # Embeddings and layer 0 still agree; the nudged layer 1 is where they part.
    assert rows["embeddings"] <= FP32_ATOL and rows["layer 0"] <= FP32_ATOL
    assert rows["layer 1"] > FP32_ATOL
    assert report["per_layer"]["first_parting"] == "layer 1"


def test_parity_on_a_non_export_is_one_line(tmp_path, tiny_checkpoint, capsys):
    rc = main(["parity", str(tmp_path), "--reference", str(tiny_checkpoint("fill-mask"))])
    err = capsys.readouterr().err
    assert rc == 2 and "bertonnx.json" in err and "Traceback" not in err


def test_parity_against_another_model_says_what_differs_in_one_line(tiny_export, tiny_checkpoint,
                                                                    tmp_path, capsys):
    """A reference of another vocabulary, family or task: one line naming the difference and
    the export's own source, not an onnxruntime traceback or "outside tolerance" (issue 31)."""
    from bertonnx.runtime.core.manifest import Manifest
    from tests.conftest import make_checkpoint

    folder = tiny_export("fill-mask", parity=True)
    head = (f"bertonnx: error: the reference is not the model {folder} was exported from: ")
    tail = (" — pass --reference the checkpoint it was made from "
            f"({Manifest.read(folder).source})")
    for reference, differs in [
        (make_checkpoint(tmp_path / "vocab", vocab=300), "vocab_size 300 (the export's 199)"),
        (make_checkpoint(tmp_path / "roberta", model_type="roberta"),
         "family 'roberta' (the export's 'bert'); vocab_size "),
        (tiny_checkpoint("text-classification"),
         "a checkpoint without the trained fill-mask head the export has"),
    ]:
        rc = main(["parity", str(folder), "--reference", str(reference)])
        err = capsys.readouterr().err
        line = err.splitlines()[-1]
        assert rc == 2 and "Traceback" not in err, err
        assert line.startswith(head + differs) and line.endswith(tail), line


def test_parity_holds_for_a_reference_without_head_weights(tmp_path, capsys):
    # A body-only checkpoint gets its fill-mask head drawn at load from a fixed seed, so the
    # export and a later, separate load of the same folder are the same model.
    from bertonnx.export import ExportOptions, export_model
    from tests.conftest import make_checkpoint

    body_only = make_checkpoint(tmp_path / "body", "feature-extraction")  # no MLM head
    export_model(body_only, "fill-mask", tmp_path / "out",
                 ExportOptions(parity=False, allow_untrained_head=True))
    rc = main(["parity", str(tmp_path / "out"), "--reference", str(body_only), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] and report["max_abs"]["logits"] <= FP32_ATOL
    assert "initialised at load" in report["note"]

@pytest.mark.parametrize("task", ["fill-mask", "text-classification", "question-answering",
                                  "feature-extraction"])
def test_task_is_read_from_architectures(tiny_checkpoint, task):
    from bertonnx.build.checkpoint import infer_task

    assert infer_task(tiny_checkpoint(task)) == task


def test_export_without_task_uses_architectures_and_explicit_task_wins(tiny_checkpoint, tmp_path, capsys):
    from bertonnx.runtime.core.manifest import Manifest

    ckpt = tiny_checkpoint("text-classification")
    assert main(["export", str(ckpt), "--out", str(tmp_path / "a"), "--no-parity"]) == 0
    assert "task text-classification (from" in capsys.readouterr().err
    assert Manifest.read(tmp_path / "a").task == "text-classification"
    assert main(["export", str(ckpt), "--task", "feature-extraction", "--out",
                 str(tmp_path / "b"), "--no-parity"]) == 0
    assert Manifest.read(tmp_path / "b").task == "feature-extraction"


def test_export_without_task_or_architectures_is_one_line(tiny_checkpoint, tmp_path, capsys):
    folder = tmp_path / "no-arch"
    shutil.copytree(tiny_checkpoint("fill-mask"), folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures", None)
    (folder / "config.json").write_text(json.dumps(config))
    rc = main(["export", str(folder), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "names no architectures" in err and "pass --task" in err
    assert len(err.strip().splitlines()) == 1


def test_int8_refusal_names_metric_and_the_way_out(tiny_checkpoint, monkeypatch):
    import dataclasses

    from bertonnx.build import load_pretrained
    from bertonnx.export import api, precisions
    from bertonnx.runtime.core.errors import CheckFailed

    failing = {"mode": "int8", "metrics": {"span": 0.75},
               "agreement": 0.75, "min_agreement": 0.9, "examples": 40, "passed": False}
    row = dataclasses.replace(precisions.PRECISIONS["int8"], reference=lambda *a: None,
                              judge=lambda *a: failing)
    monkeypatch.setitem(precisions.PRECISIONS, "int8", row)
    monkeypatch.setattr(api.parity, "session", lambda path: None)  # the judge is replaced
    m = load_pretrained(tiny_checkpoint("question-answering"), "question-answering")
    with pytest.raises(CheckFailed) as e:
        api.check_parity(m, None, "int8")
    msg = str(e.value)
    assert "question-answering agreement with the fp32 torch model (span) is 0.750 on 40" in msg
    assert "--no-parity" in msg and "drop --quantize int8" in msg
