"""TEI's /rerank and /embed_sparse and Cohere's /v2/rerank on a real server (uvicorn in a
thread, tiny exports), with httpx and the real `cohere` client: answers equal to the library's,
in TEI's and Cohere's shapes, and their limits refused before the model runs.
"""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from bertonnx.runtime.server import Limits, ServeOptions

from tests.runtime._threaded_server import threaded_server
from tests.runtime.server.test_tei import refusal

QUERY = "who has a cat"
DOCS = ["the cat sat on the mat", "a dog ran to the river in paris", "music", "the cat"]
NAME, MAX_INPUTS = "tiny-rerank", 6


@pytest.fixture(scope="module")
def ranker(ours):
    return ours("text-ranking")


@pytest.fixture(scope="module")
def url(ranker):
    options = ServeOptions(name=NAME, limits=Limits(max_inputs=MAX_INPUTS, max_tokens=200))
    with threaded_server(ranker, NAME, options) as u:
        yield u


def post(url, path, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def test_tei_rerank_is_the_cross_encoder(url, ranker):
    want = ranker(QUERY, DOCS)                       # best first, CrossEncoder.rank's order
    got = post(url, "/rerank", {"query": QUERY, "texts": DOCS})
    assert got.status_code == 200
    ranks = got.json()
    assert [set(r) for r in ranks] == [{"index", "score"}] * len(DOCS)
    assert [r["index"] for r in ranks] == [w["corpus_id"] for w in want]
    np.testing.assert_allclose([r["score"] for r in ranks], [w["score"] for w in want],
                               atol=1e-6)
    assert all(0 < r["score"] < 1 for r in ranks)    # sigmoid of the one logit
    raw = post(url, "/rerank", {"query": QUERY, "texts": DOCS, "raw_scores": True,
                                "return_text": True}).json()
    logits = ranker(QUERY, DOCS, raw_scores=True)
    assert [(r["index"], r["text"]) for r in raw] == [(w["corpus_id"], DOCS[w["corpus_id"]])
                                                      for w in logits]
    np.testing.assert_allclose([r["score"] for r in raw], [w["score"] for w in logits],
                               atol=1e-6)
    assert list(raw[0]) == ["index", "text", "score"]   # TEI's Rank field order


def test_tei_rerank_refusals(url, ranker):
    refusal(post(url, "/rerank", {"query": QUERY, "texts": []}), 400, "Empty",
            "`texts` cannot be empty")
    refusal(post(url, "/rerank", {"query": QUERY, "texts": ["a"] * (MAX_INPUTS + 1)}), 422,
            "Validation", f"batch size {MAX_INPUTS + 1}", f"--max-inputs {MAX_INPUTS}")
    long = " ".join(["music"] * 70)
    refusal(post(url, "/rerank", {"query": QUERY, "texts": ["a", long], "truncate": False}),
            422, "Validation", f"must have less than {ranker.max_length} tokens", "input 1")
    refusal(post(url, "/rerank", {"query": QUERY, "texts": [long] * 4}), 422, "Validation",
            "--max-tokens 200")
    refusal(post(url, "/rerank", {"query": QUERY, "texts": "a"}), 422, "Validation",
            "`texts` must be a list")
    refusal(post(url, "/embed", {"inputs": "a"}), 404, "Backend", "text-ranking export")
    refusal(post(url, "/embed_sparse", {"inputs": "a"}), 404, "Backend", "sparse-embedding")
    info = httpx.get(url + "/info", timeout=30).json()
    assert info["model_type"] == {"reranker": {"id2label": {"0": "score"},
                                               "label2id": {"score": 0}}}


def test_cohere_client_reranks(url, ranker):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="unused", base_url=url, max_retries=0)
    want = ranker(QUERY, DOCS)
    got = client.rerank(model=NAME, query=QUERY, documents=DOCS)
    assert [r.index for r in got.results] == [w["corpus_id"] for w in want]
    np.testing.assert_allclose([r.relevance_score for r in got.results],
                               [w["score"] for w in want], atol=1e-6)
    assert got.id and got.meta.api_version.version == "2"
    assert got.meta.tokens.input_tokens == ranker.work(ranker.read_inputs(QUERY, DOCS)).tokens
    top = client.rerank(model=NAME, query=QUERY, documents=DOCS, top_n=2)
    assert [r.index for r in top.results] == [w["corpus_id"] for w in want[:2]]
    # each document cut to its first 2 tokens, then ranked
    cut = client.rerank(model=NAME, query=QUERY, documents=DOCS, max_tokens_per_doc=2)
    short = ["the cat", "a dog", "music", "the cat"]
    assert [r.relevance_score for r in cut.results] == pytest.approx(
        [w["score"] for w in ranker(QUERY, short)], abs=1e-6)

    with pytest.raises(cohere.errors.NotFoundError) as e:
        client.rerank(model="rerank-v3.5", query=QUERY, documents=DOCS)
    assert NAME in e.value.body["message"]
    with pytest.raises(cohere.errors.UnprocessableEntityError) as e:
        client.rerank(model=NAME, query=QUERY, documents=["a"] * (MAX_INPUTS + 1))
    assert f"--max-inputs {MAX_INPUTS}" in e.value.body["message"]
    with pytest.raises(cohere.errors.BadRequestError) as e:
        client.rerank(model=NAME, query=QUERY, documents=[])
    assert "documents" in e.value.body["message"]


def test_embed_sparse_is_the_splade_vector(ours):
    pipe = ours("sparse-embedding")
    texts = ["the cat sat on the mat", "music"]
    with threaded_server(pipe, "tiny-splade") as url:
        got = post(url, "/embed_sparse", {"inputs": texts})
        assert got.status_code == 200
        for vector, want in zip(got.json(), pipe(texts)):
            assert [e["index"] for e in vector] == sorted(e["index"] for e in want)
            assert {e["index"]: e["value"] for e in vector} == pytest.approx(
                {e["index"]: e["value"] for e in want}, abs=1e-6)
        one = post(url, "/embed_sparse", {"inputs": "music"}).json()   # alone: as the library
        assert one == [sorted(pipe("music"), key=lambda e: e["index"])]
        refusal(post(url, "/rerank", {"query": "a", "texts": ["b"]}), 404, "Backend")
        # a SparseEncoder's prompt names (a plain MLM checkpoint: query and document, empty)
        with_prompt = post(url, "/embed_sparse", {"inputs": "music", "prompt_name": "query"})
        assert with_prompt.json() == [sorted(pipe("music", prompt_name="query"),
                                             key=lambda e: e["index"])]
        refusal(post(url, "/embed_sparse", {"inputs": "a", "prompt_name": "passage"}), 422,
                "Validation", "prompt_name must be one of 'query', 'document' or null")
        assert httpx.get(url + "/info", timeout=30).json()["model_type"] == {
            "embedding": {"pooling": "splade"}}
