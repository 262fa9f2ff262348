"""Several models behind one server: requests routed by `model` (OpenAI's and Cohere's field,
the v2 path, the optional `model` of the TEI-shaped routes) or by the route's task, with the
real `openai` and `cohere` clients; every answer equal to the library's on that export (the
session's tiny exports, `ours`), /v1/models, /info, /health and /metrics covering them all, a
busy model not holding up another, and `serve DIR DIR`'s own checks of its arguments.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from bertonnx.runtime.cli.main import cli
from bertonnx.runtime.server import RayOptions, ServeOptions
from bertonnx.runtime.server.metrics import Metrics

from tests.live_server import LiveServer
from tests.runtime._threaded_server import threaded_server
from tests.runtime.server.test_tei import refusal

TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris", "music"]
QUERY = "who has a cat"
# name -> the `ours` export it serves; two embedders, so /embed needs a `model`
EXPORTS = {"emb": "feature-extraction", "emb2": "distilbert:feature-extraction",
           "rank": "text-ranking", "splade": "sparse-embedding", "cls": "text-classification"}


@pytest.fixture(scope="module")
def pipes(ours):
    return {name: ours(export) for name, export in EXPORTS.items()}


@pytest.fixture(scope="module")
def url(pipes):
    with threaded_server(pipes, "multi") as u:
        yield u


def post(url, path, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def test_openai_client_picks_the_model_by_name(url, pipes):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
        assert [m.id for m in client.models.list()] == list(EXPORTS)
        assert client.models.retrieve("rank").id == "rank"
        for name in ("emb", "emb2"):
            got = client.embeddings.create(model=name, input=TEXTS, encoding_format="float")
            np.testing.assert_allclose([d.embedding for d in got.data], pipes[name](TEXTS),
                                       atol=1e-6)
        with pytest.raises(openai.NotFoundError) as e:
            client.embeddings.create(model="nope", input=TEXTS)
        assert e.value.body["code"] == "model_not_found" and "'emb', 'emb2'" in str(e.value)
        with pytest.raises(openai.BadRequestError) as e:   # a model of another task
            client.embeddings.create(model="rank", input=TEXTS)
        assert "feature-extraction export" in str(e.value)


def test_cohere_client_picks_the_model_by_name(url, pipes):
    cohere = pytest.importorskip("cohere")
    client = cohere.ClientV2(api_key="unused", base_url=url, max_retries=0)
    want = pipes["rank"](QUERY, TEXTS)
    got = client.rerank(model="rank", query=QUERY, documents=TEXTS)
    assert [r.index for r in got.results] == [w["corpus_id"] for w in want]
    np.testing.assert_allclose([r.relevance_score for r in got.results],
                               [w["score"] for w in want], atol=1e-6)
    with pytest.raises(cohere.errors.NotFoundError) as e:
        client.rerank(model="rerank-v3.5", query=QUERY, documents=TEXTS)
    assert "'rank'" in e.value.body["message"]
    with pytest.raises(cohere.errors.NotFoundError) as e:   # not a cross-encoder
        client.rerank(model="emb", query=QUERY, documents=TEXTS)
    assert "text-ranking" in e.value.body["message"]


def test_v2_routes_by_the_path(url, pipes):
    body = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": TEXTS[:2]}]}
    got = post(url, "/v2/models/cls/infer", body).json()
    want = pipes["cls"](TEXTS[:2])
    assert got["model_name"] == "cls"
    assert got["outputs"][0]["data"] == [w["label"] for w in want]
    vectors = post(url, "/v2/models/emb2/infer", body).json()["outputs"][0]
    np.testing.assert_allclose(np.reshape(vectors["data"], vectors["shape"]),
                               pipes["emb2"](TEXTS[:2]), atol=1e-6)
    assert httpx.get(url + "/v2/models/splade").json()["name"] == "splade"
    assert httpx.get(url + "/v2/models/rank/ready").json() == {"name": "rank", "ready": True}
    missing = post(url, "/v2/models/nope/infer", body)
    assert missing.status_code == 404 and "'cls'" in missing.json()["error"]


def test_tei_routes_take_a_model_or_the_one_of_their_task(url, pipes):
    ranks = post(url, "/rerank", {"query": QUERY, "texts": TEXTS}).json()   # the one reranker
    assert [r["index"] for r in ranks] == [w["corpus_id"] for w in pipes["rank"](QUERY, TEXTS)]
    sparse = post(url, "/embed_sparse", {"inputs": TEXTS[:1]}).json()
    assert {e["index"] for e in sparse[0]} == {e["index"] for e in pipes["splade"](TEXTS[:1])[0]}
    # two embedders: /embed names its model, or is told the choices
    refusal(post(url, "/embed", {"inputs": TEXTS}), 422, "Validation",
            "several models here answer /embed", "'emb', 'emb2'")
    np.testing.assert_allclose(post(url, "/embed", {"inputs": TEXTS, "model": "emb2"}).json(),
                               pipes["emb2"](TEXTS), atol=1e-6)
    refusal(post(url, "/embed", {"inputs": TEXTS, "model": "nope"}), 404, "Validation",
            "'nope' is not served here")
    refusal(post(url, "/rerank", {"query": QUERY, "texts": TEXTS, "model": "emb"}), 404,
            "Backend", "the model 'emb' is a feature-extraction export", "text-ranking export")
    # /predict serves every task: Hugging Face's convention with `model`
    got, want = post(url, "/predict", {"inputs": TEXTS[0], "model": "cls"}).json(), \
        pipes["cls"](TEXTS[0])
    assert [g["label"] for g in got] == [w["label"] for w in want]
    np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-6)
    choose = post(url, "/predict", {"inputs": TEXTS[0]})
    assert choose.status_code == 422 and "'emb', 'emb2', 'rank', 'splade', 'cls'" in \
        choose.json()["error"]


def test_info_health_metrics_and_openapi_cover_every_model(url, pipes):
    info = httpx.get(url + "/info", params={"model": "rank"}).json()
    assert info["served_model_name"] == "rank" and "reranker" in info["model_type"]
    refusal(httpx.get(url + "/info"), 422, "Validation", "name one in `model`")
    assert httpx.get(url + "/health").json() == {"status": "ok",
                                                  "models": {n: pipes[n].task for n in EXPORTS}}
    post(url, "/embed", {"inputs": TEXTS, "model": "emb"})
    samples = Metrics.parse(httpx.get(url + "/metrics").text)
    assert samples['bertonnx_requests_total{model="emb",status="200"}'] >= 1
    assert all(samples[f'bertonnx_model_ready{{model="{n}"}}'] == 1 for n in EXPORTS)
    assert samples['bertonnx_batch_size_count{model="emb"}'] >= 1
    validator = pytest.importorskip("openapi_spec_validator")
    doc = httpx.get(url + "/openapi.json").json()
    validator.validate(doc)
    assert doc["paths"]["/v2/models/{name}/infer"]["post"]["parameters"][0]["schema"][
        "enum"] == list(EXPORTS)
    embed = doc["paths"]["/embed"]["post"]["requestBody"]["content"]["application/json"]
    assert embed["schema"]["properties"]["model"]["enum"] == list(EXPORTS)
    one = httpx.get(url + "/openapi.json", params={"model": "rank"}).json()
    validator.validate(one)
    assert "/rerank" in one["paths"] and "/embed" not in one["paths"]


class _Gated:
    """A pipeline whose calls wait for `gate` (the test's; a state it sets, not a race)."""

    def __init__(self, pipeline):
        self._pipeline, self.gate, self.called = pipeline, threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._pipeline, name)

    def __call__(self, *args, **kwargs):
        self.called.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return self._pipeline(*args, **kwargs)


def test_a_busy_model_does_not_hold_up_another(pipes):
    slow = _Gated(pipes["cls"])
    models = {"slow": slow, "emb": pipes["emb"], "rank": pipes["rank"]}
    # three models, one worker each: two model calls at once across them (the shared bound)
    assert ServeOptions().model_calls(len(models)) == 2
    with threaded_server(models, "multi") as url:
        waiting = threading.Thread(target=post, args=(url, "/predict",
                                                      {"inputs": TEXTS, "model": "slow"}))
        waiting.start()
        try:
            assert slow.called.wait(30)   # the slow model's call holds a slot now
            got = post(url, "/embed", {"inputs": TEXTS})   # the one embedder here
            assert got.status_code == 200
            np.testing.assert_allclose(got.json(), pipes["emb"](TEXTS), atol=1e-6)
        finally:
            slow.gate.set()
            waiting.join(30)


@pytest.mark.parametrize("argv, words", [
    (["a", "b", "--name", "x"], "--name is given 1 time(s) for 2 DIR(s)"),
    (["a", "b", "--name", "x", "--name", "x"], "two models would be named 'x'"),
    (["one/m", "two/m"], "two models would be named 'm'"),
])
def test_serve_refuses_bad_model_arguments(argv, words):
    res = CliRunner().invoke(cli, ["serve", *argv])
    assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output


def test_serve_several_folders(tiny_export):
    emb, rank = tiny_export("feature-extraction"), tiny_export("text-ranking")
    with LiveServer.serve(emb, rank, "--name", "e", "--name", "r") as server:
        models = httpx.get(server.url + "/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["e", "r"]
        ranks = httpx.post(server.url + "/rerank", json={"query": QUERY, "texts": TEXTS}).json()
        assert len(ranks) == len(TEXTS)
        assert "bertonnx: model r (text-ranking)" in server.log


def test_a_ray_replica_serves_every_model(tiny_export, ours):
    """`serve A B --ray`: each replica is the whole app with both models (no cluster needed
    to run one replica in process)."""
    pytest.importorskip("ray")
    import asyncio
    import json

    from bertonnx.runtime.server.ray_serve import ModelReplica, application
    from bertonnx.runtime.server.relay import HttpRequest

    folders = [("e", str(tiny_export("feature-extraction"))),
               ("r", str(tiny_export("text-ranking")))]
    body = json.dumps({"query": QUERY, "texts": TEXTS}).encode()
    json_ = ((b"content-type", b"application/json"),)

    async def run():
        replica = ModelReplica.__new__(ModelReplica)   # Ray awaits its async __init__
        await replica.__init__(folders, ServeOptions())
        try:
            await replica.check_health()
            models = await replica(HttpRequest("GET", "/v1/models", b"", (), b""))
            ranks = await replica(HttpRequest("POST", "/rerank", b"", json_, body))
            return json.loads(models.body), json.loads(ranks.body)
        finally:
            await replica.lifespan.shutdown()

    models, ranks = asyncio.run(run())
    assert [m["id"] for m in models["data"]] == ["e", "r"]
    want = ours("text-ranking")(QUERY, TEXTS)
    assert [r["index"] for r in ranks] == [w["corpus_id"] for w in want]
    np.testing.assert_allclose([r["score"] for r in ranks], [w["score"] for w in want],
                               atol=1e-6)
    assert application([(n, Path(d)) for n, d in folders], ServeOptions(),
                       RayOptions("auto")) is not None


def test_serve_several_folders_on_triton(tiny_export, ours):
    """`serve A B --engine triton`: one Triton model per export in one repository, each
    answering as the library does (within 1e-6: Triton merges requests into one call)."""
    triton = pytest.importorskip("tests.runtime.triton.test_server")   # skips without Triton
    import subprocess
    import sys

    from bertonnx.runtime.server.process import announced_url

    argv = [sys.executable, "-m", "bertonnx.runtime.cli", "serve",
            str(tiny_export("feature-extraction")), str(tiny_export("text-classification")),
            "--engine", "triton", "--port", "0", "--name", "e", "--name", "c",
            "--triton-python", triton.stub_python()]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        url = triton.until(lambda: (line := proc.stderr.readline()) and (
            lines.append(line) or announced_url(line)) or proc.poll() is not None,
            "no announcement")
        assert isinstance(url, str), "".join(lines) + proc.stderr.read()
        client = triton.thttp.InferenceServerClient(url.removeprefix("http://"),
                                                    network_timeout=60)
        texts = {"text": TEXTS[:2]}
        for name, export in (("e", "feature-extraction"), ("c", "text-classification")):
            got = client.infer(name, triton.request(triton.thttp, texts))
            want = triton.library(ours(export), texts, {})
            for t in triton.task_tensors(export).outputs:
                triton.assert_same(got.as_numpy(t.name), want[t.name], t.datatype, t.name)
        client.close()
    finally:
        proc.terminate()
        proc.wait(60)


def test_the_shared_bound_holds_one_model_call_at_once():
    """Two batchers sharing a bound of 1: the second model's call starts only once the
    first's has ended (the order of events, not a timing)."""
    import asyncio

    from bertonnx.runtime.server.batching import BatchConfig, DynamicBatcher

    events, gate = [], threading.Event()

    def runner(name, wait):
        def run(payloads, params):
            events.append(f"{name} start")
            if wait:
                assert gate.wait(30), "the test never opened the gate"
            events.append(f"{name} end")
            return payloads
        return run

    async def main():
        shared = asyncio.Semaphore(1)
        a = DynamicBatcher(runner("a", True), BatchConfig(max_wait_ms=0), shared=shared)
        b = DynamicBatcher(runner("b", False), BatchConfig(max_wait_ms=0), shared=shared)
        a.start(), b.start()
        first = asyncio.ensure_future(a.submit("x", 1, {}))
        while "a start" not in events:
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(b.submit("y", 1, {}))
        deadline = time.monotonic() + 30
        while not shared._waiters:   # b's batch waits for the shared slot (none: a bug)
            assert time.monotonic() < deadline and "b start" not in events, events
            await asyncio.sleep(0.01)
        assert events == ["a start"]
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(first, second), 30) == ["x", "y"]
        await a.close(), await b.close()

    asyncio.run(main())
    assert events == ["a start", "a end", "b start", "b end"]


def test_api_keys_guard_every_model_and_open_each_ones_probe(pipes):
    from bertonnx.runtime.server.settings import Access

    options = ServeOptions(access=Access(("sekrit-key-0123",)))
    with threaded_server({"emb": pipes["emb"], "rank": pipes["rank"]}, "multi", options) as url:
        assert httpx.get(url + "/v1/models").status_code == 401
        for name in ("emb", "rank"):   # each model's readiness probe needs no key
            assert httpx.get(url + f"/v2/models/{name}/ready").status_code == 200
        keyed = httpx.get(url + "/v1/models", headers={"Authorization": "Bearer sekrit-key-0123"})
        assert [m["id"] for m in keyed.json()["data"]] == ["emb", "rank"]
