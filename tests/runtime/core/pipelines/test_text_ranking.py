"""text-ranking (issue 27, item 2): a CrossEncoder folder, as sentence-transformers 5 saves it
(and as v4 wrote it), exports with its task inferred and ranks as `CrossEncoder.rank` does —
the same documents in the same order, scores within 1e-4 of `CrossEncoder.predict`, truncated
where its tokenizer truncates. A CrossEncoder of several labels exports as text-classification
with its activation, so its pair scores are `predict`'s; reranking it is refused, as `rank`
refuses it."""
from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.cross_encoder import folder_task, read_cross_encoder
from bertonnx.runtime.core.errors import ConfigError, InputError
from bertonnx.runtime.core.manifest import Manifest

from tests.conftest import make_checkpoint
from tests.runtime._compare import assert_same

st = pytest.importorskip("sentence_transformers")   # the test extra's reference

RANK = "text-ranking"
QUERIES = ["the cat sat on the mat", "a dog ran to the river in paris"]
DOCS = ["the dog ran to the river in paris and london with music and film .",
        "a cat", "happy sad city", "the cat sat on the mat with the dog by the house",
        "music , film and a play in london", "the river"]
MAX_LENGTH = 20   # below the 64 positions: the longer pairs are cut where CrossEncoder cuts


def export(folder, out, *argv) -> None:
    """`bertonnx export FOLDER` as a user runs it: the task left to the folder."""
    assert main(["export", str(folder), "--out", str(out), "--no-parity", *argv]) == 0


@pytest.fixture(scope="module")
def v5(tiny_checkpoint, tmp_path_factory):
    """(CrossEncoder folder saved by sentence-transformers 5, its export)."""
    root = tmp_path_factory.mktemp("cross-encoder")
    st.CrossEncoder(str(tiny_checkpoint(RANK)), max_length=MAX_LENGTH).save_pretrained(
        str(root / "ce"))
    export(root / "ce", root / "out")
    return root / "ce", root / "out"


def test_the_folder_says_it_ranks_and_the_export_records_its_activation(v5):
    ce, out = v5
    assert json.loads((ce / "config_sentence_transformers.json").read_text())["model_type"] \
        == "CrossEncoder"
    assert folder_task(ce) == RANK
    manifest = Manifest.read(out)
    assert manifest.task == RANK and manifest.defaults == {"activation_fn": "sigmoid"}
    pipe = load(out)
    assert pipe.max_length == MAX_LENGTH   # its max_length, carried by tokenizer_config.json


def test_rank_equals_crossencoder(v5, caplog):
    ce, out = v5
    ref, pipe = st.CrossEncoder(str(ce)), load(out)
    assert ref.max_seq_length == pipe.max_length
    for q in QUERIES:
        want = ref.rank(q, DOCS, return_documents=True)
        with caplog.at_level(logging.WARNING, logger="bertonnx"):
            got = pipe(q, DOCS, return_documents=True)
        assert_same(got, [{**w, "score": float(w["score"])} for w in want])
        assert [r["corpus_id"] for r in got] == [w["corpus_id"] for w in want]
        assert_same(pipe(query=q, documents=DOCS, top_k=2), ref.rank(q, DOCS, top_k=2))
    assert "were longer than the model's 20 tokens and were truncated" in caplog.text
    # raw_scores: the logits, as predict with no activation
    pairs = [(q, d) for q in QUERIES for d in DOCS]
    logits = ref.predict(pairs, activation_fn=torch.nn.Identity())
    got = pipe([{"query": q, "documents": DOCS} for q in QUERIES], raw_scores=True)
    by_id = [sorted(r, key=lambda x: x["corpus_id"]) for r in got]
    np.testing.assert_allclose([x["score"] for r in by_id for x in r], logits, atol=1e-4,
                               rtol=0)
    # the same scores in document order, whichever way the call was made
    np.testing.assert_allclose([x["score"] for x in sorted(pipe(QUERIES[0], DOCS),
                                                           key=lambda x: x["corpus_id"])],
                               ref.predict([(QUERIES[0], d) for d in DOCS]), atol=1e-4, rtol=0)


def test_a_v4_folder_and_its_activation(tiny_checkpoint, tmp_path):
    """sentence-transformers 4 kept the activation in config.json; v5 reads it still."""
    ce = tmp_path / "v4"
    shutil.copytree(tiny_checkpoint(RANK), ce)
    config = json.loads((ce / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity",
                                       "version": "4.1.0"}
    (ce / "config.json").write_text(json.dumps(config))
    assert read_cross_encoder(ce).activation == "identity"
    export(ce, tmp_path / "out")
    assert Manifest.read(tmp_path / "out").defaults == {"activation_fn": "identity"}
    pipe = load(tmp_path / "out")
    want = st.CrossEncoder(str(ce)).rank(QUERIES[1], DOCS)
    assert_same(pipe(QUERIES[1], DOCS), want)
    assert min(w["score"] for w in want) < 0   # logits indeed, not probabilities


def test_which_activation_a_folder_names(tmp_path, caplog):
    folder = make_checkpoint(tmp_path / "m", "text-classification", labels={0: "s"},
                             tokenizer=False)
    assert read_cross_encoder(folder) is None and folder_task(folder) is None  # plain: no
    config = json.loads((folder / "config.json").read_text())

    def named(**extra):
        (folder / "config.json").write_text(json.dumps({**config, **extra}))
        return read_cross_encoder(folder)

    assert named(sbert_ce_default_activation_function="torch.nn.modules.activation.Tanh"
                 ).activation == "tanh"   # before sentence-transformers 4
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        assert named(sbert_ce_default_activation_function="mypkg.Custom").activation == "sigmoid"
    assert "not torch's" in caplog.text   # untrusted code: the default, as CrossEncoder does
    with pytest.raises(ConfigError, match="activation torch.nn.ReLU is not one bertonnx"):
        named(sbert_ce_default_activation_function="torch.nn.ReLU")


def test_several_labels_classify_pairs_and_cannot_rank(tiny_checkpoint, tmp_path):
    ce = tmp_path / "ce3"
    st.CrossEncoder(str(tiny_checkpoint("text-classification"))).save_pretrained(str(ce))
    assert folder_task(ce) == "text-classification"
    export(ce, tmp_path / "out")
    pipe = load(tmp_path / "out")
    assert pipe.folder.manifest.defaults == {"function_to_apply": "none"}   # Identity
    pairs = [(q, d) for q in QUERIES for d in DOCS[:3]]
    got = pipe([{"text": q, "text_pair": d} for q, d in pairs], top_k=None)
    labels = pipe.labels
    scores = [[next(x["score"] for x in r if x["label"] == lab) for lab in labels] for r in got]
    np.testing.assert_allclose(scores, st.CrossEncoder(str(ce)).predict(pairs), atol=1e-4,
                               rtol=0)
    # reranking it is refused before anything is converted, in one line
    with pytest.raises(ConfigError, match="has 3 labels; reranking needs one score per"):
        export_model(ce, RANK, tmp_path / "no", ExportOptions(parity=False))
    assert not (tmp_path / "no").exists()


def test_inputs_and_their_errors(v5):
    pipe = load(v5[1])
    one = pipe({"query": "the cat", "documents": ["a cat", "the river"]})
    assert_same(pipe("the cat", ["a cat", "the river"]), one)
    assert isinstance(one, list) and {r["corpus_id"] for r in one} == {0, 1}
    assert pipe("the cat", []) == []   # nothing to rank, as CrossEncoder.rank
    assert pipe([{"query": "a", "documents": ["b"]}])[0][0]["corpus_id"] == 0
    for bad, message in [(("the cat", "a cat"), "the documents are a str"),
                         (("the cat", ["a", " "]), "document #1 is empty"),
                         (("", ["a"]), "the query is empty"),
                         (([{"query": "q"}],), "input #0 is not a {query, documents}")]:
        with pytest.raises(InputError, match=message):
            pipe(*bad)
    with pytest.raises(InputError, match="top_k must be an integer from 1"):
        pipe("the cat", ["a"], top_k=0)
