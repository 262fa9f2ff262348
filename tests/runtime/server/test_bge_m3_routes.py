"""A BGE-M3 export (the tiny `bge-m3` model) on a real server (uvicorn in a thread), each of its
outputs on the route of its kind, asked by that protocol's real client: /embed (huggingface_hub's
InferenceClient) and OpenAI's /v1/embeddings (the openai package) answer the dense vectors,
/embed_sparse the lexical weights, /embed_multi the colbert vectors — each the library's own
(pipelines/bge_m3.py, itself FlagEmbedding's within 1e-4: tests/runtime/core/pipelines/
test_bge_m3.py) — and what BGE-M3 does not do is refused in one line naming the field."""
from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest

from tests.runtime._threaded_server import threaded_server
from tests.runtime.server.test_tei import refusal

TEXTS = ["the cat sat on the mat , by the river", "paris", "a dog ran"]
NAME = "tiny-m3"


@pytest.fixture(scope="module")
def m3(ours):
    return ours("bge-m3")


@pytest.fixture(scope="module")
def url(m3):
    with threaded_server(m3, NAME) as u:
        yield u


def post(url, path, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def test_embed_is_the_dense_vector(url, m3, hf_hub_online):
    client = hf_hub_online.InferenceClient(model=url + "/embed")
    want = np.stack([r["dense_vecs"] for r in m3(TEXTS)])
    np.testing.assert_allclose(client.feature_extraction(TEXTS), want, atol=1e-6, rtol=0)
    raw = post(url, "/embed", {"inputs": TEXTS[0], "normalize": False})
    np.testing.assert_allclose(raw.json()[0], m3(TEXTS[0], normalize=False)["dense_vecs"],
                               atol=1e-6, rtol=0)


def test_openai_embeddings_are_the_dense_vectors(url, m3):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
        got = client.embeddings.create(model=NAME, input=TEXTS)
        packed = client.embeddings.create(model=NAME, input=TEXTS, encoding_format="base64")
    want = [r["dense_vecs"] for r in m3(TEXTS)]
    for g, w in zip(got.data, want):
        np.testing.assert_allclose(g.embedding, w, atol=1e-6, rtol=0)
    assert got.usage.prompt_tokens == m3.work(m3.read_inputs(TEXTS)).tokens
    # base64 asked for: the package hands the string over, little-endian float32 (exact)
    for g, w in zip(packed.data, want):
        np.testing.assert_array_equal(np.frombuffer(base64.b64decode(g.embedding), "<f4"), w)


def test_embed_sparse_is_the_lexical_weights(url, m3):
    got = post(url, "/embed_sparse", {"inputs": TEXTS})
    assert got.status_code == 200
    for entries, r in zip(got.json(), m3(TEXTS)):
        want = sorted(r["lexical_weights"], key=lambda e: e["index"])   # TEI lists by index
        assert [e["index"] for e in entries] == [e["index"] for e in want]
        np.testing.assert_allclose([e["value"] for e in entries], [e["value"] for e in want],
                                   atol=1e-6, rtol=0)


def test_embed_multi_is_the_colbert_vectors(url, m3):
    want = [r["colbert_vecs"] for r in m3(TEXTS)]
    got = post(url, "/embed_multi", {"inputs": TEXTS, "is_query": True}).json()
    assert [np.asarray(v).shape for v in got] == [w.shape for w in want]
    for v, w in zip(got, want):
        np.testing.assert_allclose(v, w, atol=1e-6, rtol=0)
    packed = post(url, "/embed_multi", {"inputs": TEXTS, "encoding_format": "base64"}).json()
    for s, w in zip(packed, want):
        assert np.array_equal(np.frombuffer(base64.b64decode(s), "<f4").reshape(w.shape), w)


def test_what_bge_m3_does_not_do_is_refused(url):
    refusal(post(url, "/embed", {"inputs": "a", "dimensions": 8}), 422, "Validation",
            "`dimensions` does not apply to a BGE-M3 export")
    refusal(post(url, "/embed", {"inputs": "a", "truncation_direction": "Left"}), 422,
            "Validation", "`truncation_direction`", "cuts long texts on the right")
    refusal(post(url, "/embed_sparse", {"inputs": "a", "prompt_name": "query"}), 422,
            "Validation", "`prompt_name`")
    refusal(post(url, "/embed", {"inputs": []}), 400, "Empty", "`inputs` cannot be empty")
    refusal(post(url, "/rerank", {"query": "a", "texts": ["b"]}), 404, "Backend")


LONG = " ".join(["the cat sat on the mat by the river"] * 12)   # past the tiny model's 64


def test_truncate_false_refuses_a_text_past_the_cut(url, m3):
    for path in ("/embed", "/embed_sparse"):
        refusal(post(url, path, {"inputs": ["paris", LONG], "truncate": False}), 422,
                "Validation", f"must have less than {m3.kept_tokens} tokens", "input 1")
        for truncate in (True, None):   # cut where FlagEmbedding cuts: the library's answer
            got = post(url, path, {"inputs": [LONG], "truncate": truncate})
            assert got.status_code == 200, got.text
    assert post(url, "/embed", {"inputs": ["paris"], "truncate": False}).status_code == 200


def test_the_cut_bounds_truncate_false_where_it_is_shorter_than_the_model(m3, monkeypatch):
    """The real BGE-M3 takes 8,192 tokens and is cut at 512: what is refused is the cut's."""
    from bertonnx.runtime.core.pipelines.bge_m3 import BgeM3Pipeline
    from bertonnx.runtime.server.tei import refuse_long
    from bertonnx.runtime.server.wire import FieldError

    tokens = [len(m3.tokenizer.backend.encode(t).ids) for t in ("the cat sat", LONG)]
    monkeypatch.setattr(BgeM3Pipeline, "kept_tokens", property(lambda self: tokens[0]))
    assert tokens[0] < m3.max_length < tokens[1]
    refuse_long(m3, ["paris", "the cat sat"])   # at most the cut: kept whole
    with pytest.raises(FieldError, match=f"must have less than {tokens[0]} tokens. Given: "
                                         r"\d+ \(input 1\)"):
        refuse_long(m3, ["paris", "the cat sat on the mat"])


def test_info_is_tei_s_embedding_model(url, m3):
    info = httpx.get(url + "/info", timeout=30).json()
    assert info["model_type"] == {"embedding": {"pooling": "cls"}}
    assert info["served_model_name"] == NAME
    assert info["max_input_length"] == m3.kept_tokens == min(512, m3.max_length)
