"""bge-m3 against FlagEmbedding itself: a tiny random BGE-M3 folder (XLM-R + colbert_linear.pt +
sparse_linear.pt, tests/bge_m3_reference.py, in the references' environment) exported and
encoded here — the dense vectors, the lexical weights (the same ids, each value) and the colbert
vectors (as many per text) each within 1e-4 of `BGEM3FlagModel.encode(..., return_dense=True,
return_sparse=True, return_colbert_vecs=True)`, in batches of one and of several padded rows, a
text cut at max_length among them; the export's parity on the encoder output it answers from."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.errors import ConfigError, InputError

from tests.bge_m3_reference import MAX_LENGTH, PAIRS, SCORE_KEYS, SCORE_WEIGHTS, TEXTS
from tests.references import REFERENCES

ATOL = 1e-4


@pytest.fixture(scope="session")
def m3_reference(tmp_path_factory) -> Path:
    """The folder tests/bge_m3_reference.py wrote: model/ and outputs.npz."""
    return REFERENCES.write("tests.bge_m3_reference",
                            tmp_path_factory.mktemp("bge-m3-reference"))


@pytest.fixture(scope="session")
def m3_export(m3_reference, tmp_path_factory) -> Path:
    """The BGE-M3 folder exported with parity (the encoder's output against torch)."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    out = tmp_path_factory.mktemp("bge-m3-export") / "m3"
    export_model(m3_reference / "model", "bge-m3", out, ExportOptions(parity=True))
    return out


def test_outputs_equal_flagembeddings(m3_reference, m3_export):
    with np.load(m3_reference / "outputs.npz") as data:
        ref = {k: data[k] for k in data.files}
    pipe = load(m3_export)
    for batch_size in (1, 4):   # alone, and padded against rows of other lengths
        got = pipe(TEXTS, batch_size=batch_size, max_length=MAX_LENGTH)
        assert len(got) == len(TEXTS)
        np.testing.assert_allclose(np.stack([g["dense_vecs"] for g in got]), ref["dense"],
                                   atol=ATOL, rtol=0)
        for i, g in enumerate(got):
            entries = sorted((e["index"], e["value"]) for e in g["lexical_weights"])
            assert [k for k, _ in entries] == ref[f"sparse_ids{i}"].tolist(), i
            np.testing.assert_allclose([v for _, v in entries], ref[f"sparse_values{i}"],
                                       atol=ATOL, rtol=0)
            values = [e["value"] for e in g["lexical_weights"]]
            assert values == sorted(values, reverse=True)   # heaviest first
            assert g["colbert_vecs"].shape == ref[f"colbert{i}"].shape, i
            np.testing.assert_allclose(g["colbert_vecs"], ref[f"colbert{i}"], atol=ATOL, rtol=0)
    # the longest text was cut at max_length tokens: its colbert vectors are the tokens after <s>
    assert max(len(g["colbert_vecs"]) for g in got) == MAX_LENGTH - 1


def test_score_helpers_equal_flagembeddings(m3_reference, m3_export):
    """compute_lexical_matching_score and colbert_score, on our outputs, as FlagEmbedding's on
    its own (every pair of TEXTS); its {id: weight} dicts are taken as well as our entries."""
    with np.load(m3_reference / "outputs.npz") as data:
        ref = {k: data[k] for k in data.files}
    pipe = load(m3_export)
    got = pipe(TEXTS, max_length=MAX_LENGTH)
    lexical = [g["lexical_weights"] for g in got]
    np.testing.assert_allclose(pipe.compute_lexical_matching_score(lexical, lexical),
                               ref["lexical_scores"], atol=ATOL, rtol=0)
    theirs = [{str(i): float(v) for i, v in zip(ref[f"sparse_ids{k}"], ref[f"sparse_values{k}"])}
              for k in range(len(TEXTS))]
    assert pipe.compute_lexical_matching_score(theirs[0], lexical[2]) == pytest.approx(
        float(ref["lexical_scores"][0, 2]), abs=ATOL)
    assert pipe.compute_lexical_matching_score([], lexical[0]) == 0
    colbert = [g["colbert_vecs"] for g in got]
    np.testing.assert_allclose([[pipe.colbert_score(q, p) for p in colbert] for q in colbert],
                               ref["colbert_scores"], atol=ATOL, rtol=0)
    with pytest.raises(InputError, match="one text's lexical weights on each side"):
        pipe.compute_lexical_matching_score(lexical, lexical[0])


def test_compute_score_equals_flagembeddings(m3_reference, m3_export):
    with np.load(m3_reference / "outputs.npz") as data:
        ref = {k: data[k] for k in data.files}
    pipe = load(m3_export)
    for w, weights in enumerate(SCORE_WEIGHTS):
        got = pipe.compute_score(PAIRS, max_query_length=MAX_LENGTH,
                                 max_passage_length=MAX_LENGTH,
                                 weights_for_different_modes=weights)
        assert set(got) == set(SCORE_KEYS)
        for key in SCORE_KEYS:
            np.testing.assert_allclose(got[key], ref[f"compute_score {key}"][w], atol=ATOL,
                                       rtol=0)
    one = pipe.compute_score(PAIRS[0], max_query_length=MAX_LENGTH,
                             max_passage_length=MAX_LENGTH)   # one pair: one float per key
    assert one["dense"] == pytest.approx(float(ref["compute_score dense"][0][0]), abs=ATOL)
    assert pipe.compute_score([]) == []
    with pytest.raises(InputError, match="3 weights"):
        pipe.compute_score(PAIRS, weights_for_different_modes=[1, 1])
    with pytest.raises(InputError, match="pairs of texts"):
        pipe.compute_score([("a", "b", "c")])


def test_outputs_asked_for_and_normalize(m3_export):
    pipe = load(m3_export)
    text = TEXTS[0]
    both = pipe(text)
    assert set(both) == {"dense_vecs", "lexical_weights", "colbert_vecs"}
    only = pipe(text, return_dense=False, return_colbert_vecs=False)
    assert set(only) == {"lexical_weights"} and only["lexical_weights"] == both["lexical_weights"]
    raw = pipe(text, normalize=False, return_sparse=False)
    np.testing.assert_allclose(np.linalg.norm(both["dense_vecs"]), 1, atol=1e-6)
    assert abs(np.linalg.norm(raw["dense_vecs"]) - 1) > 1e-2
    np.testing.assert_allclose(raw["dense_vecs"] / np.linalg.norm(raw["dense_vecs"]),
                               both["dense_vecs"], atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(both["colbert_vecs"], axis=1), 1, atol=1e-6)
    # a call's tokens are counted where it cuts them (OpenAI's usage, --max-tokens)
    long = TEXTS[4]
    assert pipe.work(pipe.read_inputs([long]), max_length=8).tokens == 8
    assert len(pipe(long, max_length=8)["colbert_vecs"]) == 7
    with pytest.raises(InputError, match="nothing to answer"):
        pipe(text, return_dense=False, return_sparse=False, return_colbert_vecs=False)


def test_export_records_the_heads_and_parity(m3_reference, m3_export):
    import json

    from bertonnx.build.checkpoint import inferred_task

    manifest = json.loads((m3_export / "bertonnx.json").read_text())
    assert manifest["task"] == "bge-m3" and manifest["parity"]["passed"]
    assert manifest["parity"]["max_abs"]["last_hidden_state"] <= 1e-4
    # the three outputs judged too: the runtime's heads on the graph against torch's on torch's
    heads = manifest["parity"]["heads"]
    assert set(heads["max_abs"]) == {"dense_vecs", "token_weights", "colbert_vecs"}
    assert max(heads["max_abs"].values()) <= 1e-4 and heads["passed"]
    assert "bge_m3_heads.safetensors" in manifest["files"]
    assert not list(m3_export.glob("*.pt"))   # no pickle reaches the runtime's folder
    assert inferred_task(m3_reference / "model")[0] == "bge-m3"


def test_export_refuses_heads_that_part_from_torch(tiny_checkpoint, tmp_path, monkeypatch):
    """A runtime head that drops its bias fails the export's parity, naming the output."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy
    from bertonnx.runtime.core.errors import CheckFailed
    from bertonnx.runtime.core.pipelines import bge_m3

    monkeypatch.setattr(bge_m3, "token_weights",
                        lambda flat, heads: np.maximum(flat @ heads.sparse_weight.T, 0)[:, 0])
    with pytest.raises(CheckFailed, match="BGE-M3's token_weights differ"):
        export_model(tiny_checkpoint("bge-m3"), "bge-m3", tmp_path / "out",
                     ExportOptions(parity=True))
    assert not (tmp_path / "out").exists()


def test_a_folder_without_the_heads_is_refused(tiny_checkpoint, tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    with pytest.raises(ConfigError, match="not a BGE-M3 folder"):
        export_model(tiny_checkpoint("xlm-roberta:feature-extraction"), "bge-m3",
                     tmp_path / "out", ExportOptions(parity=False))
