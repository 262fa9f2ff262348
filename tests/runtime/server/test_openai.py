"""OpenAI's embeddings API with the real `openai` client against `bertonnx serve` (one server
for the module, a tiny feature-extraction export).

Vectors are compared with the library's sentence embedding, `pipe(texts, pooling="mean",
normalize=True)`: a request that runs alone is padded exactly as the library call with the same
texts, so its floats are identical (float32, through JSON or base64); requests merged with
others are padded with them and compared at 1e-6 absolute.
"""
from __future__ import annotations

import asyncio
import base64
import threading

import httpx
import numpy as np
import pytest

from bertonnx.runtime.server import ServeOptions, create_app

from tests.live_server import LiveServer
from tests.runtime._threaded_server import threaded_server
from tests.runtime.server._helpers import TestClient, wait_ready

openai = pytest.importorskip("openai")

NAME = "tiny-embed"
TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris", "music"]
BATCHED_ATOL = 1e-6
MAX_INPUTS = 8


@pytest.fixture(scope="module")
def pipe(ours):
    return ours("feature-extraction")


@pytest.fixture(scope="module")
def server(tiny_export):
    with LiveServer.serve(tiny_export("feature-extraction"), "--name", NAME, "--max-wait-ms", "200",
                       "--max-inputs", str(MAX_INPUTS)) as s:
        yield s
        assert s.terminate() == 0, s.log


@pytest.fixture(scope="module")
def client(server):
    # retries off: a refusal must reach the test as it was answered
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def sentence_embeddings(pipe, texts) -> np.ndarray:
    return np.asarray(pipe(list(texts), pooling="mean", normalize=True), dtype=np.float32)


def test_embeddings_are_the_library_sentence_embeddings(client, pipe):
    want = sentence_embeddings(pipe, TEXTS)
    got = client.embeddings.create(input=TEXTS, model=NAME, encoding_format="float")
    assert got.object == "list" and got.model == NAME
    assert [d.index for d in got.data] == [0, 1, 2]
    assert all(d.object == "embedding" for d in got.data)
    np.testing.assert_array_equal(np.array([d.embedding for d in got.data], np.float32), want)
    tokens = sum(len(e.ids) for e in pipe.tokenizer.encode_batch(TEXTS))
    assert got.usage.prompt_tokens == got.usage.total_tokens == tokens

    # mean pooling and L2 normalisation, checked apart from the pipeline's own options
    hidden = np.asarray(pipe(TEXTS[0], pooling="none"), dtype=np.float64)[0]     # (T, H)
    mean = hidden.mean(axis=0)
    np.testing.assert_allclose(got.data[0].embedding, mean / np.linalg.norm(mean), atol=1e-6)

    # one string in: one embedding out; the client's default (base64, decoded by the client)
    one = client.embeddings.create(input=TEXTS[1], model=NAME)
    assert len(one.data) == 1
    np.testing.assert_array_equal(np.asarray(one.data[0].embedding, np.float32), want[1])
    assert one.usage.prompt_tokens == len(pipe.tokenizer.encode(TEXTS[1]).ids)


def test_base64_is_little_endian_float32(client, pipe):
    got = client.embeddings.create(input=TEXTS, model=NAME, encoding_format="base64")
    vectors = [np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in got.data]
    np.testing.assert_array_equal(np.stack(vectors), sentence_embeddings(pipe, TEXTS))
    # `dimensions` equal to the model's width is what it gives anyway
    width = len(vectors[0])
    same = client.embeddings.create(input=TEXTS[:1], model=NAME, dimensions=width)
    np.testing.assert_array_equal(np.asarray(same.data[0].embedding, np.float32), vectors[0])
    # fewer: the first ones, renormalized (sentence-transformers' truncate_dim), as the library
    cut = client.embeddings.create(input=TEXTS, model=NAME, dimensions=8)
    np.testing.assert_allclose([d.embedding for d in cut.data], pipe(TEXTS, dimensions=8),
                               atol=1e-6)
    first = np.stack(vectors)[:, :8]
    np.testing.assert_allclose([d.embedding for d in cut.data],
                               first / np.linalg.norm(first, axis=1, keepdims=True), atol=1e-6)


def test_models(client, server):
    listed = client.models.list()
    assert [m.id for m in listed.data] == [NAME]
    model = client.models.retrieve(NAME)
    assert model.object == "model" and model.owned_by == "bertonnx" and model.created > 0
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4")
    assert e.value.body["code"] == "model_not_found"


def _refused(call, error=openai.BadRequestError):
    with pytest.raises(error) as e:
        call()
    body = e.value.body
    assert set(body) == {"message", "type", "param", "code"}, body
    return e.value.status_code, body


def test_refusals_in_openai_shape(client, server):
    create = client.embeddings.create
    status, body = _refused(lambda: create(input="x", model="text-embedding-3-small"),
                            openai.NotFoundError)
    assert status == 404 and body["param"] == "model" and body["code"] == "model_not_found"
    assert NAME in body["message"]
    status, body = _refused(lambda: create(input=[[101, 2023, 102]], model=NAME))
    assert body["param"] == "input" and "token ids" in body["message"]
    assert body["type"] == "invalid_request_error"
    _, body = _refused(lambda: create(input=[1, 2, 3], model=NAME))
    assert "token ids" in body["message"]
    _, body = _refused(lambda: create(input=["fine", "   "], model=NAME))
    assert body["param"] == "input" and "empty" in body["message"]
    _, body = _refused(lambda: create(input=[], model=NAME))
    assert body["param"] == "input"
    _, body = _refused(lambda: create(input="x", model=NAME, encoding_format="hex"))
    assert body["param"] == "encoding_format"
    _, body = _refused(lambda: create(input="x", model=NAME, dimensions=10_000))
    assert body["param"] == "dimensions" and "more than this model's" in body["message"]
    _, body = _refused(lambda: create(input="x", model=NAME, dimensions=0))
    assert body["param"] == "dimensions" and "positive integer" in body["message"]
    _, body = _refused(lambda: create(input="x", model=NAME, extra_body={"pooling": "cls"}))
    assert body["param"] == "pooling" and "Unrecognized request argument" in body["message"]
    # past --max-inputs: the server's own limit, in OpenAI's shape
    status, body = _refused(lambda: create(input=["a"] * (MAX_INPUTS + 1), model=NAME),
                            openai.APIStatusError)
    assert status == 413 and "--max-inputs" in body["message"]

    r = httpx.post(server.url + "/v1/embeddings", content=b"{nope", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(server.url + "/v1/chat/completions", json={}, timeout=30)
    assert r.status_code == 404 and "/v1/embeddings" in r.json()["error"]["message"]
    assert "Traceback" not in server.log


def test_concurrent_requests_share_batches_across_protocols(server, pipe):
    """8 OpenAI requests and 4 /predict requests with the same pipeline arguments at once:
    all answered, merged into shared model calls, each equal to the library's answer."""
    texts = [f"the {w} sat on the mat" for w in ("cat", "dog", "man", "team", "film", "game",
                                                  "city", "river")]

    async def burst():
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused",
                                      max_retries=0) as c, \
                httpx.AsyncClient(base_url=server.url, timeout=60) as h:
            return await asyncio.gather(
                *(c.embeddings.create(input=t, model=NAME) for t in texts),
                *(h.post("/predict", json={"inputs": [t], "parameters": {
                    "pooling": "mean", "normalize": True}}) for t in texts[:4]))

    before = server.metrics()
    answers = asyncio.run(burst())
    after = server.metrics()
    want = sentence_embeddings(pipe, texts)
    for i, got in enumerate(answers[:8]):
        np.testing.assert_allclose(got.data[0].embedding, want[i], atol=BATCHED_ATOL, rtol=0)
    for i, r in enumerate(answers[8:]):
        assert r.status_code == 200
        np.testing.assert_allclose(r.json()[0], want[i], atol=BATCHED_ATOL, rtol=0)
    key = 'bertonnx_requests_total{status="200"}'
    assert after[key] - before.get(key, 0) == 12
    calls = after["bertonnx_batch_requests_count"] - before["bertonnx_batch_requests_count"]
    assert calls < 12, "no model call merged two requests"


def test_other_tasks_refuse_embeddings(ours):
    """A text-classification export still lists its model, and answers /v1/embeddings with an
    OpenAI error that says what export it needs."""
    with threaded_server(ours("text-classification"), "sentiment") as url, \
            openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as c:
        assert [m.id for m in c.models.list().data] == ["sentiment"]
        status, body = _refused(lambda: c.embeddings.create(input="x", model="sentiment"))
        assert status == 400 and body["code"] == "model_not_supported"
        assert "feature-extraction" in body["message"] and body["param"] == "model"


def test_models_wait_for_the_model(ours):
    """/v1/models answers 503 in OpenAI's shape until the model is loaded."""
    gate = threading.Event()
    pipe = ours("feature-extraction")
    app = create_app("unused", ServeOptions(name=NAME), loader=lambda: gate.wait(10) and pipe)
    with TestClient(app) as web:
        r = web.get("/v1/models")
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
        r = web.post("/v1/embeddings", json={"input": "x", "model": NAME})
        assert r.status_code == 503 and r.json()["error"]["code"] == "not_ready"
        gate.set()
        wait_ready(web)
        assert web.get("/v1/models").json()["data"][0]["id"] == NAME
        r = web.post("/v1/embeddings", json={"input": "x", "model": NAME})
        assert r.status_code == 200 and r.json()["data"][0]["embedding"] == pipe(
            ["x"], pooling="mean", normalize=True)[0]
