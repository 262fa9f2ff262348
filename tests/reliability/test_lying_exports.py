"""Exports that cannot lie: a folder whose files were swapped or edited — and whose manifest
hashes were then fixed up to match, as someone determined would — is refused at load (or at
the first call, for a graph whose output axes are symbolic) with one line naming the file and
what does not fit. Never a plausible wrong answer, never a traceback.

Each row damages a copy of one of the session's tiny exports, re-hashes the manifest, and
expects `load(DIR)(text)` to raise ArtifactError matching the row; the CLI is run on a few rows
to show the same line reaches the user.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import onnx
import pytest
from onnx import helper

from bertonnx.runtime import ArtifactError, load
from bertonnx.runtime.core.contract import MANIFEST_NAME, MODEL_NAME
from bertonnx.runtime.core.manifest import sha256

from tests.conftest import CLS, FM, NER

from .conftest import one_error_line


def _rehash(d: Path, drop: tuple[str, ...] = ()) -> None:
    """The manifest made to agree with the files as they are now (less `drop`)."""
    m = json.loads((d / MANIFEST_NAME).read_text(encoding="utf-8"))
    m["files"] = {f: sha256(d / f) for f in m["files"] if (d / f).is_file() and f not in drop}
    (d / MANIFEST_NAME).write_text(json.dumps(m), encoding="utf-8")


def _edit_json(name: str, **changes) -> Callable:
    def edit(d: Path, exports) -> None:
        data = json.loads((d / name).read_text(encoding="utf-8"))
        for k, v in changes.items():
            if v is _DROP:
                data.pop(k, None)
            else:
                data[k] = v
        (d / name).write_text(json.dumps(data), encoding="utf-8")
    return edit


_DROP = object()


def _graph_of(other: str) -> Callable:
    """Another export's graph (model.onnx and its weights, model.onnx.data) put in this
    folder."""
    def put(d, exports):
        for name in (MODEL_NAME, MODEL_NAME + ".data"):
            shutil.copy(exports(other) / name, d / name)
    return put


def _symbolic_labels(d: Path, exports) -> None:
    """The label axis made data-dependent (a Reshape to (batch, -1) at the end, so neither
    the graph nor onnxruntime's inference knows it), and id2label one short: the load-time
    shape check cannot see it, the first call must."""
    g = onnx.load(str(d / MODEL_NAME))
    out = g.graph.output[0]
    for node in g.graph.node:
        node.output[:] = ["logits_raw" if o == out.name else o for o in node.output]
    g.graph.node.extend([
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Constant", [], ["zero"], value_ints=[0]),
        helper.make_node("Constant", [], ["one"], value_ints=[1]),
        helper.make_node("Constant", [], ["minus_one"], value_ints=[-1]),
        helper.make_node("Slice", ["ids_shape", "zero", "one"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus_one"], ["flat"], axis=0),
        helper.make_node("Reshape", ["logits_raw", "flat"], [out.name])])
    dims = out.type.tensor_type.shape.dim
    dims[1].ClearField("dim_value")
    dims[1].dim_param = "labels"
    onnx.save(g, str(d / MODEL_NAME))
    _edit_json("config.json", id2label={"0": "negative", "1": "positive"},
               label2id={"negative": 0, "positive": 1})(d, exports)


@dataclass(frozen=True)
class Lie:
    id: str
    task: str            # the export damaged
    damage: Callable     # damage(folder, exports)
    match: str           # regex on the one-line error
    drop: tuple = ()     # files left out of the re-hashed manifest
    text: str = "the cat sat on the mat"


LIES = [
    # the graph is another model's, the hashes fixed up
    Lie("four-labels-in-a-three-label-export", CLS, _graph_of("multilabel"),
        r"logits axis 1 is 4, config\.json's num_labels 3"),
    Lie("token-model-in-a-fill-mask-export", FM, _graph_of(NER),
        r"does not fit fill-mask: logits axis 2 is 5, config\.json's vocab_size"),
    Lie("fill-mask-model-in-a-token-export", NER, _graph_of(FM),
        r"does not fit token-classification: logits axis 2 is \d+, config\.json's num_labels 5"),
    Lie("classifier-in-a-qa-export", "question-answering", _graph_of(CLS),
        r"does not fit question-answering: no output start_logits"),
    # id2label of the wrong size: softmax would become sigmoid (1 label) or labels shift
    Lie("id2label-one-label", CLS, _edit_json("config.json", id2label={"0": "x"}),
        r"logits axis 1 is 3, config\.json's num_labels 1"),
    Lie("id2label-five-labels", CLS,
        _edit_json("config.json", id2label={str(i): f"l{i}" for i in range(5)}),
        r"logits axis 1 is 3, config\.json's num_labels 5"),
    Lie("id2label-wrong-size-symbolic-axis", CLS, _symbolic_labels,
        r"answered outputs that do not fit text-classification: logits axis 1 is 3, "
        r"config\.json's num_labels 2"),
    # edits that gave IndexError / TypeError / ValueError tracebacks, or were silently misread
    Lie("id2label-names-as-keys", CLS, _edit_json("config.json", id2label={"a": "x", "b": "y",
                                                                          "c": "z"}),
        r"config\.json has id2label = .*not an object"),
    Lie("id2label-a-list", NER, _edit_json("config.json", id2label=["O", "B-PER"]),
        r"config\.json has id2label = \[.*not an object"),
    Lie("id2label-gap", CLS, _edit_json("config.json", id2label={"0": "a", "1": "b", "7": "c"}),
        r"config\.json has id2label = .*ids 0\.\.n-1 once each"),
    Lie("id2label-ids-as-names", NER,
        _edit_json("config.json", id2label={str(i): i for i in range(5)}),
        r"config\.json has id2label"),
    Lie("num-labels-a-string", CLS,
        _edit_json("config.json", id2label=_DROP, label2id=_DROP, num_labels="3"),
        r"config\.json has num_labels = \"3\", which is not a positive integer"),
    Lie("problem-type-a-number", CLS, _edit_json("config.json", problem_type=5),
        r"config\.json has problem_type = 5"),
    Lie("max-positions-a-string", FM, _edit_json("config.json", max_position_embeddings="64"),
        r"config\.json has max_position_embeddings = \"64\""),
    Lie("model-type-a-list", FM, _edit_json("config.json", model_type=["bert"]),
        r"config\.json has model_type = \[\"bert\"\], which is not a string"),
    Lie("lowercase-a-string", FM, _edit_json("tokenizer_config.json", do_lower_case="no"),
        r"tokenizer_config\.json has do_lower_case = \"no\", which is not true or false"),
    Lie("mask-token-a-number", FM, _edit_json("tokenizer_config.json", mask_token=5),
        r"tokenizer_config\.json has mask_token = 5"),
    Lie("input-names-a-string", FM,
        _edit_json("tokenizer_config.json", model_input_names="input_ids"),
        r"tokenizer_config\.json has model_input_names"),
    # the manifest must vouch for every file the runtime reads, and be a real version
    Lie("manifest-omits-config", CLS, _edit_json("config.json", id2label={"0": "x"}),
        r"does not list config\.json, which the runtime reads", drop=("config.json",)),
    Lie("manifest-omits-tokenizer", FM, lambda d, e: None,
        r"does not list tokenizer\.json, which the runtime reads", drop=("tokenizer.json",)),
    Lie("manifest-omits-vocab", FM, lambda d, e: None,
        r"does not list vocab\.txt", drop=("vocab.txt",)),
    Lie("tokenizer-dropped-in", FM,
        lambda d, e: (d / "special_tokens_map.json").write_text('{"mask_token": "[CLS]"}'),
        r"does not list special_tokens_map\.json"),
    Lie("manifest-version-0", FM, _edit_json(MANIFEST_NAME, version=0),
        r"schema version 0; versions start at 1"),
    Lie("manifest-version-negative", FM, _edit_json(MANIFEST_NAME, version=-1),
        r"schema version -1; versions start at 1"),
]


@pytest.fixture(scope="module")
def lying(tiny_export, tmp_path_factory):
    root = tmp_path_factory.mktemp("lies")

    def make(lie: Lie) -> Path:
        d = root / lie.id
        if not d.exists():
            shutil.copytree(tiny_export(lie.task), d)
            lie.damage(d, tiny_export)
            _rehash(d, lie.drop)
        return d

    return make


def test_the_exports_are_honest_before_the_damage(tiny_export):
    """Every row's starting point loads and answers: the errors below come from the damage."""
    for task in sorted({lie.task for lie in LIES}):
        pipe = load(tiny_export(task))
        args = ({"question": "who sat ?", "context": "the cat sat"},) \
            if task == "question-answering" else ("the [MASK] sat",)
        assert pipe(*args)


@pytest.mark.parametrize("lie", LIES, ids=[lie.id for lie in LIES])
def test_a_lying_export_is_refused(lie, lying):
    d = lying(lie)
    with pytest.raises(ArtifactError) as info:
        pipe = load(d)
        pipe({"question": "who ?", "context": lie.text} if lie.task == "question-answering"
             else lie.text + (" [MASK]" if lie.task == FM else ""))
    message = str(info.value)
    assert re.search(lie.match, message), message
    assert "\n" not in message


@pytest.mark.parametrize("lie_id", ["four-labels-in-a-three-label-export", "id2label-gap",
                                    "manifest-omits-config", "manifest-version-0"])
def test_the_cli_says_it_in_one_line(lie_id, lying, run_cli):
    lie = next(x for x in LIES if x.id == lie_id)
    command = {CLS: "classify", FM: "fill-mask"}[lie.task]
    proc = run_cli(command, lying(lie), lie.text + (" [MASK]" if lie.task == FM else ""))
    line = one_error_line(proc)
    assert proc.returncode == 2 and re.search(lie.match, line), line
