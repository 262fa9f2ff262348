"""multi-vector (ColBERT) against PyLate itself: tiny random ColBERT folders saved by pylate 1.6
(tests/colbert_reference.py, in the references' environment), exported, and encoded here — the
same number of token vectors per text as `ColBERT.encode(is_query=...)` and each within 1e-4,
for queries (prefix, [MASK] expansion, attended or not, cut at the query length) and documents
(prefix or none, skiplist and [UNK] dropped, cut at the document length), in batches whose rows
are padded; MaxSim scores as pylate's `colbert_scores`. A Stanford (colbert-ai) checkpoint, which
pylate loads as it is, exports as it is too."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.errors import ArtifactError, ConfigError
from bertonnx.runtime.core.pipelines.multi_vector import maxsim

from tests.colbert_reference import CASES, DOCUMENTS, POOLS, QUERIES, STANFORD
from tests.runtime._engines import NO_OPENVINO, OPENVINO
from tests.runtime.core.pipelines._colbert import (  # noqa: F401 — fixtures
    ATOL, assert_token_vectors, colbert_export, colbert_references, export_json,
    reference_outputs)


@pytest.mark.parametrize("case", [*CASES, STANFORD])
def test_token_vectors_equal_pylates(case, colbert_references, colbert_export):
    ref = reference_outputs(colbert_references, case)
    pipe = load(colbert_export(case))
    assert_token_vectors(pipe, ref, case)
    # one text in, one array out; unit vectors unless normalize=False
    one = pipe(DOCUMENTS[1])
    assert isinstance(one, np.ndarray) and one.shape == ref["d1"].shape
    raw = pipe(DOCUMENTS[1], normalize=False)
    np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), one,
                               atol=ATOL, rtol=0)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0, atol=1e-3)


def test_maxsim_scores_equal_pylates_rerank(colbert_references, colbert_export):
    ref = reference_outputs(colbert_references, "plain")
    pipe = load(colbert_export("plain"))
    documents = pipe(DOCUMENTS)
    for row, query in enumerate(pipe(QUERIES, is_query=True)):
        np.testing.assert_allclose(maxsim(query, documents), ref["scores"][row],
                                   atol=ATOL, rtol=0)
        ranked = pipe.rank(QUERIES[row], DOCUMENTS, top_k=3, return_documents=True)
        assert [r["corpus_id"] for r in ranked] == list(np.argsort(-ref["scores"][row])[:3])
        assert [r["text"] for r in ranked] == [DOCUMENTS[r["corpus_id"]] for r in ranked]


def test_a_colbert_folder_exports_as_multi_vector_with_its_settings(colbert_references,
                                                                     tmp_path, capsys):
    # no --task: the folder says ColBERT
    manifest, err = export_json(colbert_references / "attend", tmp_path / "out", capsys)
    assert manifest["task"] == "multi-vector" and "a ColBERT" in err
    assert manifest["parity"]["passed"]
    record = manifest["sentence_transformers"]["colbert"]
    assert (record["query_length"], record["document_length"]) == (10, 16)
    assert record["attend_to_expansion_tokens"] and record["document_prefix"] == ""
    assert [(m["in_features"], m["out_features"], m["bias"]) for m in record["modules"]] == [
        (32, 24, True), (24, 8, True)]
    # the Dense weights travel as safetensors the manifest vouches for
    assert all(m["weights"] in manifest["files"] for m in record["modules"])


def test_a_stanford_checkpoint_exports_as_multi_vector_with_its_metadata(colbert_references,
                                                                        tmp_path, capsys):
    """colbert-ai's folder (HF_ColBERT, linear.weight among the encoder's weights,
    artifact.metadata) is a ColBERT without being re-saved: its settings as pylate reads them,
    the projection carried alone (the token vectors themselves: test_token_vectors_equal_...)."""
    manifest, err = export_json(colbert_references / STANFORD, tmp_path / "out", capsys)
    assert manifest["task"] == "multi-vector" and "a Stanford ColBERT" in err
    record = manifest["sentence_transformers"]["colbert"]
    assert (record["query_prefix"], record["document_prefix"]) == ("[unused0]", "[unused1]")
    assert (record["query_length"], record["document_length"]) == (10, 18)
    assert [(m["in_features"], m["out_features"], m["bias"], m["weights"])
            for m in record["modules"]] == [(32, 16, False, "1_Dense/model.safetensors")]
    assert "1_Dense/model.safetensors" in manifest["files"]


def test_a_stanford_checkpoint_saved_as_pytorch_model_bin_exports_too(colbert_references,
                                                                      tmp_path):
    """The same checkpoint with its weights as colbert-ai's older releases save them (a torch
    pickle, read at export with weights_only): PyLate's vectors for the safetensors copy."""
    import shutil

    import torch
    from safetensors.torch import load_file

    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    folder = tmp_path / "stanford-bin"
    shutil.copytree(colbert_references / STANFORD, folder)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    export_model(folder, "multi-vector", tmp_path / "out", ExportOptions(parity=False))
    assert_token_vectors(load(tmp_path / "out"),
                         reference_outputs(colbert_references, STANFORD), STANFORD)
    # without artifact.metadata's dim the projection's shape is unknown before export reads it
    meta = json.loads((folder / "artifact.metadata").read_text())
    del meta["dim"]
    (folder / "artifact.metadata").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="names no dim"):
        export_model(folder, "multi-vector", tmp_path / "again", ExportOptions(parity=False))


def test_a_folder_that_is_not_colbert_is_refused_in_one_line(tiny_checkpoint, tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    with pytest.raises(ConfigError, match="not a multi-vector folder"):
        export_model(tiny_checkpoint("feature-extraction"), "multi-vector", tmp_path / "x",
                     ExportOptions(parity=False))
    assert not (tmp_path / "x").exists()


def test_a_length_past_the_model_s_is_cut_to_fit_it(tiny_export):
    # a folder's document/query length past the model's positions (PyLate's embeddings would
    # overflow): the row, marker included, is cut to the model's length, not past it
    import dataclasses

    pipe = load(tiny_export("multi-vector"))
    s = pipe.settings
    long_text = " ".join(["cat"] * (pipe.max_length * 2))
    fitting = dataclasses.replace(s, document_length=pipe.max_length,
                                  query_length=pipe.max_length)
    pipe.settings = dataclasses.replace(s, document_length=pipe.max_length + 50,
                                        query_length=pipe.max_length + 50)
    past = [pipe([long_text], is_query=q)[0] for q in (False, True)]
    assert [len(ids) for ids, _ in pipe.rows([long_text], False)] == [pipe.max_length]
    pipe.settings = fitting
    for got, want in zip(past, [pipe([long_text], is_query=q)[0] for q in (False, True)]):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
def test_batches_are_never_wider_than_the_longest_row_a_text_makes(tiny_export):
    """OpenVINO rounds a batch's width up to 16 (a kernel per shape); a ColBERT row is never
    longer than its cut and marker, so documents cut there are fed that wide, not the next
    multiple of 16, and queries (all expanded to their length) exactly that wide — the same
    vectors as the CPU provider's."""
    import dataclasses

    folder = tiny_export("multi-vector")
    texts = [" ".join(["cat"] * n) for n in (3, 9, 40, 60, 80)]
    answers = {}
    for engine in ("cpu", "openvino:f32"):
        pipe = load(folder, providers=engine)
        pipe.settings = dataclasses.replace(pipe.settings, document_length=21, query_length=11)
        seen, run = [], pipe.session.run
        pipe.session.run = lambda feeds, outputs=None: (seen.append(feeds["input_ids"].shape),
                                                        run(feeds, outputs))[1]
        answers[engine] = pipe(texts) + pipe(texts, is_query=True)
        assert max(t for _, t in seen[:-1]) == 21   # documents
        assert seen[-1][1] == 11                    # the queries, in one call
    assert pipe.session.config.pad_multiple == 16
    for a, b in zip(*answers.values()):
        assert a.shape == b.shape and np.abs(a - b).max() <= ATOL


@pytest.mark.parametrize("case", ["plain", "attend", STANFORD])
def test_pooled_documents_equal_pylates(case, colbert_references, colbert_export):
    # encode(pool_factor=k, protected_tokens=p): Ward clustering of the token vectors, each
    # cluster's mean; the same number of vectors as PyLate's and each within 1e-4
    pytest.importorskip("scipy")
    pipe = load(colbert_export(case))
    ref = reference_outputs(colbert_references, case)
    for factor, protected in POOLS:
        for batch_size in (1, 3):
            got = pipe(DOCUMENTS, pool_factor=factor, protected_tokens=protected,
                       batch_size=batch_size)
            for i, vectors in enumerate(got):
                want = ref[f"p{factor}-{protected}-{i}"]
                assert vectors.shape == want.shape, (factor, protected, i)
                assert len(want) < len(ref[f"d{i}"])   # pooled: fewer than the document's
                np.testing.assert_allclose(vectors, want, atol=ATOL, rtol=0)
    # queries are never pooled (PyLate pools documents only)
    queries = pipe(QUERIES, is_query=True, pool_factor=2)
    assert [q.shape for q in queries] == [ref[f"q{i}"].shape for i in range(len(QUERIES))]


def test_pooling_without_scipy_is_one_line(tiny_export):
    from tests.conftest import cli_without

    done = cli_without(("scipy",), "embed-multi", str(tiny_export("multi-vector")),
                       "the cat sat on the mat", "--pool-factor", "2")
    assert done.returncode != 0
    assert "pool_factor needs scipy" in done.stderr and "bertonnx[colbert]" in done.stderr
    assert "Traceback" not in done.stderr
