"""multi-vector against sentence-transformers 6's MultiVectorEncoder itself: tiny random folders
saved by sentence-transformers 6.2 (tests/st6_reference.py, in the references-st6 environment),
exported, and encoded here — the same number of token vectors per text as encode_query /
encode_document and each within 1e-4, for queries ("fixed" expansion with its own token, "min"
expansion attended to, or none; text prompts; the skiplist on queries) and documents (prompt or
none, the skiplist, a skiplist word the vocabulary lacks leaving [UNK] in, keep_only_token_ids,
cut at the document length or the model's maximum), in batches whose rows are padded; MaxSim
scores as MultiVectorEncoder.similarity's. Settings bertonnx would not reproduce: refused in one
line."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.multi_vector_encoder import read_multi_vector

from tests.references import ST6
from tests.runtime.core.pipelines._colbert import (assert_token_vectors, export_json,
                                                   exports_of, reference_outputs)
from tests.st6_reference import CASES, FROM_PYLATE


@pytest.fixture(scope="session")
def st6_references(tmp_path_factory) -> Path:
    """The folder tests/st6_reference.py wrote (a MultiVectorEncoder folder and an .npz per
    case)."""
    return ST6.write("tests.st6_reference", tmp_path_factory.mktemp("st6-references"))


@pytest.fixture(scope="session")
def st6_export(st6_references, tmp_path_factory):
    """st6_export(case) -> the export folder of the `case` MultiVectorEncoder (made once)."""
    return exports_of(st6_references, tmp_path_factory.mktemp("st6-exports"),
                      (*CASES, FROM_PYLATE))


@pytest.mark.parametrize("case", [*CASES, FROM_PYLATE])
def test_token_vectors_equal_multi_vector_encoders(case, st6_references, st6_export):
    assert_token_vectors(load(st6_export(case)), reference_outputs(st6_references, case), case)


def test_a_multi_vector_encoder_exports_as_multi_vector_with_its_settings(st6_references,
                                                                          tmp_path, capsys):
    # no --task: the folder says MultiVectorEncoder
    manifest, _ = export_json(st6_references / "min", tmp_path / "out", capsys)
    assert manifest["task"] == "multi-vector" and manifest["parity"]["passed"]
    record = manifest["sentence_transformers"]["colbert"]
    assert (record["query_length"], record["query_floor"], record["document_length"]) == (
        14, 8, None)
    assert record["attend_to_expansion_tokens"] and not record["skip_unknown"]
    assert record["skiplist_tasks"] == ["query", "document"] and record["query_prefix"] == ""
    assert [(m["in_features"], m["out_features"], m["bias"]) for m in record["modules"]] == [
        (32, 24, True), (24, 8, True)]
    assert all(m["weights"] in manifest["files"] for m in record["modules"])


def _edited(source: Path, folder: Path, edit) -> Path:
    """A copy of `source` whose modules.json / config_sentence_transformers.json `edit` changed."""
    shutil.copytree(source, folder)
    modules = json.loads((folder / "modules.json").read_text())
    st = json.loads((folder / "config_sentence_transformers.json").read_text())
    edit(modules, st)
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(st))
    return folder


def _pooling(modules, st):
    modules.insert(-1, {"idx": 9, "name": "9", "path": "9_Pool", "type": "sentence_transformers."
                        "multi_vector_encoder.modules.token_pooling.HierarchicalTokenPooling"})


@pytest.mark.parametrize("edit, says", [
    (lambda modules, st: modules.pop(), "lists no Normalize module"),
    (lambda modules, st: modules.insert(1, modules.pop()), "Dense module 1_Dense after Normalize"),
    (_pooling, "HierarchicalTokenPooling, which bertonnx does not compute"),
    (lambda modules, st: st.update(similarity_fn_name="meanmaxsim"),
     "similarity_fn_name 'meanmaxsim'"),
    (lambda modules, st: st.update(query_prefix="[unused0]"), "PyLate's query_prefix"),
])
def test_a_setting_bertonnx_would_not_reproduce_is_refused_in_one_line(edit, says, st6_references,
                                                                       tmp_path):
    folder = _edited(st6_references / "fixed", tmp_path / "folder", edit)
    with pytest.raises(ArtifactError, match=says) as e:
        read_multi_vector(folder)
    assert "\n" not in str(e.value)


def test_the_default_prompt_stands_for_a_missing_side(st6_references, tmp_path):
    def edit(modules, st):
        st.update(prompts={"query": "what : ", "passage": "the : "},
                  default_prompt_name="passage")

    settings = read_multi_vector(_edited(st6_references / "fixed", tmp_path / "f", edit))
    assert (settings.query_prompt, settings.document_prompt) == ("what : ", "the : ")


def test_the_cli_refuses_such_a_folder_in_one_line(st6_references, tmp_path, capsys):
    folder = _edited(st6_references / "plain", tmp_path / "folder",
                     lambda modules, st: modules.pop())   # no Normalize
    assert main(["export", str(folder), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip()   # the inferred task, then the one line
    assert "Traceback" not in err and not (tmp_path / "out").exists()
    assert [line for line in err.splitlines() if "Normalize" in line] == [err.splitlines()[-1]]
    assert "lists no Normalize module" in err.splitlines()[-1]
