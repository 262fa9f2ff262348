"""API keys (`serve --api-key`, $BERTONNX_API_KEY, --api-key-file; runtime/server/auth.py):
the real `openai` and `cohere` clients with `api_key` (the right key answers, a wrong one raises
their authentication error), every protocol's 401 in its own error shape with
`WWW-Authenticate: Bearer`, the probes open, the key carried to a Ray replica's app, the keys
documented in /openapi.json, and `serve`'s flags and environment read as documented."""
from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from click.testing import CliRunner

from bertonnx.runtime.cli.main import cli, main
from bertonnx.runtime.server import ServeOptions, create_app
from bertonnx.runtime.server.relay import HttpRequest, Lifespan, exchange
from bertonnx.runtime.server.settings import Access

from tests.live_server import LiveServer
from tests.runtime._threaded_server import threaded_server
from tests.runtime.server._helpers import EchoPipeline, TestClient, wait_ready

KEY, OTHER = "k-3f9a1c77e2b04d6a", "second-key-55aa"
GUARDED = {"authorization": f"Bearer {KEY}"}


def options(name: str, *keys: str) -> ServeOptions:
    return ServeOptions(name=name, access=Access(keys or (KEY, OTHER)))


# -- every protocol's 401, in process --------------------------------------------------------


@pytest.fixture(scope="module")
def echo():
    # server faults are answers here: EchoPipeline has no tokenizer for /openapi.json's examples
    app = create_app("/x/echo", options("echo"), loader=EchoPipeline)
    with TestClient(app, raise_server_exceptions=False) as client:
        wait_ready(client)
        yield client


@pytest.mark.parametrize("method, path, shape", [
    ("POST", "/predict", {"error", "type"}),
    ("POST", "/v1/embeddings", {"error"}),                  # OpenAI's error object
    ("GET", "/v1/models", {"error"}),
    ("POST", "/embed", {"error", "error_type"}),             # TEI's ErrorResponse
    ("GET", "/info", {"error", "error_type"}),
    ("POST", "/v2/rerank", {"id", "message"}),               # Cohere's
    ("POST", "/v2/embed", {"id", "message"}),
    ("POST", "/v2/models/echo/infer", {"error"}),            # Open Inference Protocol v2
    ("GET", "/v2/models/echo", {"error"}),
    ("GET", "/metrics", {"error", "type"}),
    ("GET", "/openapi.json", {"error", "type"}),
    ("GET", "/no/such/route", {"error", "type"}),            # no hint of what exists
])
def test_every_route_but_the_probes_needs_the_key(echo, method, path, shape):
    missing = echo.request(method, path, json={})
    wrong = echo.request(method, path, json={}, headers={"authorization": "Bearer nope-nope"})
    for r, challenge in ((missing, 'Bearer realm="bertonnx"'),
                         (wrong, 'Bearer realm="bertonnx", error="invalid_token"')):
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == challenge
        assert set(r.json()) == shape
    assert "needs an API key" in missing.text and "not valid" in wrong.text
    if path == "/v1/embeddings":
        assert wrong.json()["error"]["code"] == "invalid_api_key"
    if path == "/embed":
        assert wrong.json()["error_type"] == "Validation"
    # with the key, the route answers as it would without keys (whatever that answer is)
    assert echo.request(method, path, json={}, headers=GUARDED).status_code != 401


@pytest.mark.parametrize("path", ["/health", "/v2/health/live", "/v2/health/ready",
                                  "/v2/models/echo/ready", "/v2/models/echo/versions/1/ready"])
def test_the_probes_stay_open(echo, path):
    assert echo.get(path).status_code == 200


def test_any_configured_key_and_the_scheme_in_any_case(echo):
    for header in (f"Bearer {KEY}", f"bearer {OTHER}", f"BEARER  {KEY} "):
        r = echo.post("/predict", json={"inputs": "a cat"}, headers={"authorization": header})
        assert r.status_code == 200, (header, r.text)
    for header in (KEY, f"Basic {KEY}", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", "Bearer ",
                   "Bearer \xe9\xe9\xe9\xe9\xe9\xe9\xe9\xe9".encode("latin-1")):
        r = echo.post("/predict", json={"inputs": "a cat"}, headers={"authorization": header})
        assert r.status_code == 401, header


def test_no_keys_no_check():
    with TestClient(create_app("/x/echo", ServeOptions(), loader=EchoPipeline)) as client:
        wait_ready(client)
        assert client.post("/predict", json={"inputs": "a cat"}).status_code == 200


def test_a_ray_replica_checks_the_key_it_is_relayed():
    """--ray plays each request into the same app in the replica (relay.exchange): the
    Authorization header travels with it, so the replica's app refuses or answers."""

    async def run():
        app = create_app("/x/echo", options("echo"), loader=EchoPipeline)
        state = app.state.bertonnx
        lifespan = Lifespan(app)
        await lifespan.startup()
        try:
            assert state.ready
            body = b'{"inputs": "a cat"}'
            head = ((b"content-type", b"application/json"),)
            refused = await exchange(app, HttpRequest("POST", "/predict", b"", head, body))
            granted = await exchange(app, HttpRequest(
                "POST", "/predict", b"", head + ((b"authorization", GUARDED["authorization"]
                                                  .encode()),), body))
            return refused, granted
        finally:
            await lifespan.shutdown()

    refused, granted = asyncio.run(run())
    assert refused.status == 401 and (b"www-authenticate", b'Bearer realm="bertonnx"') in \
        refused.headers
    assert granted.status == 200 and b"A CAT" in granted.body


# -- the real clients ------------------------------------------------------------------------


def test_openai_client_with_its_api_key(ours):
    openai = pytest.importorskip("openai")
    pipe = ours("feature-extraction")
    texts = ["the cat sat on the mat", "music"]
    with threaded_server(pipe, "tiny-embed", options("tiny-embed")) as url:
        with openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0) as good:
            got = good.embeddings.create(input=texts, model="tiny-embed")
            want = np.asarray(pipe(texts, pooling="mean", normalize=True), dtype=np.float32)
            np.testing.assert_allclose([d.embedding for d in got.data], want, atol=1e-6)
            assert [m.id for m in good.models.list()] == ["tiny-embed"]
        with openai.OpenAI(base_url=url + "/v1", api_key="sk-wrong-key-123",
                           max_retries=0) as bad:
            with pytest.raises(openai.AuthenticationError) as e:
                bad.embeddings.create(input=texts, model="tiny-embed")
        assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
        # the document says so: 401 on the guarded routes, a bearer scheme, none on /health
        doc = httpx.get(url + "/openapi.json", headers=GUARDED, timeout=30).json()
        embeddings = doc["paths"]["/v1/embeddings"]["post"]
        assert {"401", "429"} <= set(embeddings["responses"])
        assert embeddings["security"] == [{"bearer": []}]
        assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert "401" not in doc["paths"]["/health"]["get"]["responses"]
        assert "security" not in doc["paths"]["/v2/health/ready"]["get"]


def test_cohere_client_with_its_api_key(ours):
    cohere = pytest.importorskip("cohere")
    ranker = ours("text-ranking")
    query, docs = "who has a cat", ["the cat sat on the mat", "a dog ran", "music"]
    with threaded_server(ranker, "tiny-rerank", options("tiny-rerank")) as url:
        good = cohere.ClientV2(api_key=OTHER, base_url=url, max_retries=0)
        got = good.rerank(model="tiny-rerank", query=query, documents=docs)
        want = ranker(query, docs)
        assert [r.index for r in got.results] == [w["corpus_id"] for w in want]
        np.testing.assert_allclose([r.relevance_score for r in got.results],
                                   [w["score"] for w in want], atol=1e-6)
        bad = cohere.ClientV2(api_key="co-wrong-key-123", base_url=url, max_retries=0)
        with pytest.raises(cohere.errors.UnauthorizedError) as e:
            bad.rerank(model="tiny-rerank", query=query, documents=docs)
        assert "not valid" in e.value.body["message"]
        # TEI's route on the same server: its shape, the same key
        r = httpx.post(url + "/rerank", json={"query": query, "texts": docs}, timeout=30)
        assert r.status_code == 401 and r.json()["error_type"] == "Validation"
        assert httpx.post(url + "/rerank", json={"query": query, "texts": docs}, timeout=30,
                          headers={"authorization": f"Bearer {KEY}"}).status_code == 200


# -- serve's flags and environment -----------------------------------------------------------


@pytest.fixture
def caught(monkeypatch):
    calls = []
    monkeypatch.setattr("bertonnx.runtime.server.process.run_server",
                        lambda model_dir, options, **kw: calls.append(options) or 0)
    monkeypatch.delenv("BERTONNX_API_KEY", raising=False)
    return calls


def test_keys_from_flags_environment_and_file(tiny_export, caught, tmp_path, monkeypatch):
    export = str(tiny_export("feature-extraction"))
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# serving keys\n{OTHER}\n\n  third-key-9876  \n", encoding="utf-8")
    runner = CliRunner()
    assert runner.invoke(cli, ["serve", export]).exit_code == 0
    assert runner.invoke(cli, ["serve", export, "--api-key", KEY, "--api-key", OTHER,
                               "--api-key-file", str(keys)]).exit_code == 0
    monkeypatch.setenv("BERTONNX_API_KEY", f"{KEY}, {OTHER},")
    assert runner.invoke(cli, ["serve", export]).exit_code == 0
    monkeypatch.setenv("BERTONNX_API_KEY", KEY)
    res = runner.invoke(cli, ["serve", export, "--api-key", OTHER])   # the flag wins
    assert res.exit_code == 0, res.output
    assert [o.access.api_keys for o in caught] == [
        (), (KEY, OTHER, OTHER, "third-key-9876"), (KEY, OTHER), (OTHER,)]
    assert KEY not in repr(caught[1])   # options may be logged; keys never are


@pytest.mark.parametrize("argv, message", [
    (["--api-key", "short"], "an API key must be 8 or more visible ASCII characters"),
    (["--api-key", "has a space in it"], "an API key must be 8 or more"),
    (["--api-key-file", "{empty}"], "holds no key"),
    (["--api-key-file", "{missing}"], "does not exist"),
    (["--engine", "triton", "--api-key", KEY], "--api-key does not apply with --engine triton: "
                                               "Triton guards its APIs"),
])
def test_bad_key_flags_are_one_line_and_exit_2(tiny_export, caught, tmp_path, capsys, argv,
                                               message):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n\n", encoding="utf-8")
    argv = [a.format(empty=empty, missing=tmp_path / "missing.txt") for a in argv]
    assert main(["serve", str(tiny_export("feature-extraction")), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not caught


def test_the_environment_key_on_a_live_server(tiny_export, monkeypatch):
    """`serve` with $BERTONNX_API_KEY only: the key is not on its command line, /health answers
    (LiveServer waits on it), /predict needs the key."""
    monkeypatch.setenv("BERTONNX_API_KEY", KEY)
    with LiveServer.serve(tiny_export("text-classification")) as server:
        with open(f"/proc/{server.proc.pid}/cmdline", "rb") as f:
            assert KEY.encode() not in f.read()
        assert any("1 API key(s) required" in line for line in server.lines)
        body = {"inputs": "the cat sat"}
        assert httpx.post(server.url + "/predict", json=body, timeout=60).status_code == 401
        r = httpx.post(server.url + "/predict", json=body, headers=GUARDED, timeout=60)
        assert r.status_code == 200 and r.json()[0]["label"]
        assert server.terminate() == 0, server.log
