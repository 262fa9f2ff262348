"""POST /embed_multi on a real server (uvicorn in a thread, the tiny ColBERT export): the
library's token vectors for queries and documents, as nested floats or base64 float32, and its
refusals in one line naming the field."""
from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.runtime._threaded_server import threaded_server
from tests.runtime.server.test_tei import refusal

TEXTS = ["the cat sat on the mat , by the river", "paris"]


@pytest.fixture(scope="module")
def colbert(ours):
    return ours("multi-vector")


@pytest.fixture(scope="module")
def url(colbert):
    with threaded_server(colbert, "tiny-colbert") as u:
        yield u


def post(url, body) -> httpx.Response:
    return httpx.post(url + "/embed_multi", json=body, timeout=30)


@pytest.mark.parametrize("is_query", [False, True])
def test_embed_multi_is_the_library_s_token_vectors(url, colbert, is_query):
    want = colbert(TEXTS, is_query=is_query)
    got = post(url, {"inputs": TEXTS, "is_query": is_query})
    assert got.status_code == 200
    vectors = got.json()
    assert [np.asarray(v).shape for v in vectors] == [w.shape for w in want]
    for v, w in zip(vectors, want):
        np.testing.assert_allclose(v, w, atol=1e-6, rtol=0)
    # base64: each text's little-endian float32 vectors, row after row (exact bytes)
    packed = post(url, {"inputs": TEXTS, "is_query": is_query,
                        "encoding_format": "base64"}).json()
    dim = want[0].shape[1]
    for s, w in zip(packed, want):
        assert np.array_equal(np.frombuffer(base64.b64decode(s), "<f4").reshape(-1, dim), w)
    raw = post(url, {"inputs": TEXTS[0], "is_query": is_query, "normalize": False}).json()
    np.testing.assert_allclose(raw[0], colbert(TEXTS[0], is_query=is_query, normalize=False),
                               atol=1e-5, rtol=1e-6)


def test_embed_multi_pools_documents_as_the_library(url, colbert):
    pytest.importorskip("scipy")
    want = colbert(TEXTS, pool_factor=2, protected_tokens=1)
    got = post(url, {"inputs": TEXTS, "pool_factor": 2, "protected_tokens": 1})
    assert got.status_code == 200
    assert [np.asarray(v).shape for v in got.json()] == [w.shape for w in want]
    for v, w in zip(got.json(), want):
        np.testing.assert_allclose(v, w, atol=1e-6, rtol=0)
    assert len(want[0]) < len(colbert(TEXTS[0])[0])


def test_embed_multi_refusals(url):
    refusal(post(url, {"inputs": []}), 400, "Empty", "`inputs` cannot be empty")
    refusal(post(url, {"inputs": "a", "is_query": "yes"}), 422, "Validation", "`is_query`")
    refusal(post(url, {"inputs": "a", "encoding_format": "int8"}), 422, "Validation",
            "`encoding_format` must be one of float, base64")
    refusal(post(url, {"inputs": "a", "pooling": "mean"}), 422, "Validation", "pooling")
    refusal(post(url, {"inputs": "a", "pool_factor": 0}), 422, "Validation", "pool_factor")
    refusal(httpx.post(url + "/embed", json={"inputs": "a"}, timeout=30), 404, "Backend",
            "multi-vector export")


def test_embed_multi_is_not_served_by_other_exports(ours):
    with threaded_server(ours("feature-extraction"), "tiny-embed") as u:
        refusal(post(u, {"inputs": "a"}), 404, "Backend", "multi-vector")


QUERY = "who has a cat"
DOCS = ["the cat sat on the mat", "a dog ran to the river in paris", "music", "the cat"]


def test_tei_rerank_on_a_colbert_export_is_maxsim(url, colbert):
    want = colbert.rank(QUERY, DOCS)                 # best first, MaxSim (pylate's scores)
    got = httpx.post(url + "/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True},
                     timeout=30)
    assert got.status_code == 200
    ranks = got.json()
    assert [(r["index"], r["text"]) for r in ranks] == [(w["corpus_id"], DOCS[w["corpus_id"]])
                                                        for w in want]
    np.testing.assert_allclose([r["score"] for r in ranks], [w["score"] for w in want],
                               atol=1e-6)


def test_cohere_client_reranks_a_colbert_export(url, colbert):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="unused", base_url=url, max_retries=0)
    want = colbert.rank(QUERY, DOCS)
    got = client.rerank(model="tiny-colbert", query=QUERY, documents=DOCS)
    assert [r.index for r in got.results] == [w["corpus_id"] for w in want]
    np.testing.assert_allclose([r.relevance_score for r in got.results],
                               [w["score"] for w in want], atol=1e-6)
    top = client.rerank(model="tiny-colbert", query=QUERY, documents=DOCS, top_n=2)
    assert [r.index for r in top.results] == [w["corpus_id"] for w in want[:2]]
    assert got.meta.tokens.input_tokens == colbert.work(
        colbert.read_inputs({"query": QUERY, "documents": DOCS})).tokens


def rerank(url, query, texts, **fields) -> httpx.Response:
    return httpx.post(url + "/rerank", json={"query": query, "texts": texts, **fields},
                      timeout=30)


def test_tei_rerank_with_truncate_false_refuses_past_the_colbert_lengths(url, colbert):
    # the tiny folder cuts documents at 24 tokens and queries at 12, the [D]/[Q] marker's place
    # included (tests/colbert_folder.py): a text's own tokens are one fewer
    s = colbert.settings
    assert (colbert.cut(False), colbert.cut(True)) == (s.document_length - 1, s.query_length - 1)
    fits = " ".join(["cat"] * (colbert.cut(False) - 2))       # [CLS] ... [SEP]: exactly the cut
    past = fits + " cat"
    kept = rerank(url, QUERY, [fits, *DOCS], truncate=False)
    assert kept.status_code == 200
    assert kept.json() == rerank(url, QUERY, [fits, *DOCS]).json()
    refusal(rerank(url, QUERY, [DOCS[0], past], truncate=False), 422, "Validation",
            f"`texts` must have less than {colbert.cut(False)} tokens",
            f"Given: {colbert.cut(False) + 1} (input 1)", "truncate true")
    long_query = " ".join(["cat"] * colbert.cut(True))
    refusal(rerank(url, long_query, DOCS, truncate=False), 422, "Validation",
            f"`query` must have less than {colbert.cut(True)} tokens",
            f"Given: {colbert.cut(True) + 2}")
    # truncated (the default): cut where PyLate cuts, so the extra token changes nothing
    assert rerank(url, QUERY, [past]).json()[0]["score"] == pytest.approx(
        rerank(url, QUERY, [fits]).json()[0]["score"], abs=1e-6)


def test_info_names_a_colbert_export_tei_s_reranker(url, colbert):
    # it answers TEI's /rerank (by MaxSim) and not /embed: to a TEI client, a reranker
    info = httpx.get(url + "/info", timeout=30).json()
    # the tokens a document keeps, not the model's length
    assert info["max_input_length"] == colbert.cut(False) < colbert.max_length
    # one score (MaxSim), named as a one-label cross-encoder's: not its config.json's labels
    assert info["model_type"] == {"reranker": {"id2label": {"0": "LABEL_0"},
                                               "label2id": {"LABEL_0": 0}}}
    assert info["served_model_name"] == "tiny-colbert"
