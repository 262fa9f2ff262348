"""The server fuzzed from its own /openapi.json with schemathesis, for every task's export: the
four checks of issue 43 (no 5xx, every status code and content type documented, every body
matching its documented schema) on requests generated from the document itself, valid and
invalid, with a fixed seed (derandomize) so CI sees the same requests every run; and every
route the app serves for an export is in that export's document.

In-process over ASGI (schemathesis.openapi.from_asgi): the app's lifespan runs in
schemathesis' own event loop, started here and waited on until the model is loaded (the
document is 503 before). Each operation's cases come from its Hypothesis strategy
(`APIOperation.as_strategy`, positive and negative) under plain `@given`: schemathesis' own
pytest fixture loader (`schemathesis.pytest.from_fixture`) sets `Function._nodeid`, which
pytest 9.2 no longer has. Reference: schemathesis' docs, guides/python-apps.md and
guides/hypothesis-strategies.md.
"""
from __future__ import annotations

import re
import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import ASGIClient, shutdown_lifespans
from schemathesis.specs.openapi.checks import (
    content_type_conformance, response_schema_conformance, status_code_conformance)
from starlette.routing import Mount, Route

from bertonnx.runtime.server import ServeOptions, create_app
from bertonnx.runtime.server.app import ENDPOINTS

from tests.runtime.server._helpers import TestClient, wait_ready

TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction", "text-ranking", "sparse-embedding", "zero-shot-classification",
         "bge-m3")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
# requests per operation and mode: the whole module within ~60 s on two slow cores
EXAMPLES = 6
# the same requests every run; no shrinking or example database (a failure names its request)
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))


def _app(pipe):
    return create_app("unused", ServeOptions(name="m"), loader=lambda: pipe)


@pytest.fixture
def api_schema(ours, task):
    """The schema of a running app (schemathesis' ASGI client, the model loaded)."""
    app = _app(ours(task))
    try:
        with ASGIClient(app) as client:   # starts the app's lifespan: the model loads
            deadline = time.monotonic() + 10
            while client.get("/health").status_code != 200:
                assert time.monotonic() < deadline, "the model did not load"
                time.sleep(0.01)
        yield schemathesis.openapi.from_asgi("/openapi.json", app)
    finally:
        shutdown_lifespans()   # the app's batcher stops here, not at interpreter exit


def _fuzz(operation, mode: GenerationMode) -> str | None:
    """What the checks found on `operation`'s requests of `mode`, None when nothing."""
    @SETTINGS
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        case.call_and_validate(checks=CHECKS)

    try:
        run()
    except (Exception, BaseExceptionGroup) as e:   # noqa: BLE001 — all findings together
        return f"{operation.method.upper()} {operation.path} ({mode.value}): {e}"
    return None


@pytest.mark.parametrize("task", TASKS)
def test_the_server_keeps_its_document(task, api_schema):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    found = [_fuzz(op, GenerationMode.POSITIVE) for op in operations]
    # invalid requests of the operations that take something (a body, a path parameter):
    # the others have nothing to get wrong
    found += [_fuzz(op, GenerationMode.NEGATIVE) for op in operations
              if {"requestBody", "parameters"} & set(op.definition.raw)]
    found = [f for f in found if f is not None]
    assert not found, "\n\n".join(found)


def test_what_the_fuzzer_found(ours):
    """Its findings, each as one request: a v2 tensor whose `parameters` is not an object was
    a 500 (now 400); the 404s for another model's name were answered but not documented."""
    with TestClient(_app(ours("feature-extraction"))) as client:
        wait_ready(client)
        doc = client.get("/openapi.json").json()["paths"]
        tensor = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}
        for body in ({"inputs": [{**tensor, "parameters": "x"}]},
                     {"inputs": [tensor], "outputs": [{"name": "embedding", "parameters": 1}]}):
            r = client.post("/v2/models/m/infer", json=body)
            assert r.status_code == 400 and "must be a JSON object" in r.json()["error"]
        r = client.post("/v1/embeddings", json={"input": "a", "model": "other"})
        assert r.status_code == 404 and "404" in doc["/v1/embeddings"]["post"]["responses"]
        for path in ("/v2/models/{name}", "/v2/models/{name}/ready", "/v1/models/{model}"):
            r = client.get(path.format(name="other", model="other"))
            assert r.status_code == 404 and "404" in doc[path]["get"]["responses"], path


# -- every route served is documented --------------------------------------------------------

# Not operations of the API: /docs is the Swagger UI page on the document and /docs/static
# its files (HTML, JS, CSS); `{rest:path}` routes are the protocols' catch-alls, answering
# 404 in the protocol's error shape for a path the server does not have.
UNDOCUMENTED = re.compile(r"^/docs(/|$)|\{rest(:path)?\}$")


def _shape(path: str) -> str:
    """/v2/models/{name}/versions/{version:str} -> /v2/models/{}/versions/{}"""
    return re.sub(r"\{[^}]*\}", "{}", path)


@pytest.mark.parametrize("task", TASKS)
def test_every_served_route_is_in_the_document(task, ours):
    """Each (method, path) the app routes is in this export's document, or is the record of a
    route for other tasks' exports (`Endpoint.tasks`), which does not answer a GET here. A
    route added without its `Endpoint` record (app.ENDPOINTS) is in no export's document: it
    fails here, named."""
    app = _app(ours(task))
    records = {(e.method, _shape(e.path)): e for e in ENDPOINTS}
    unrecorded, answered = [], []
    with TestClient(app) as client:
        wait_ready(client)
        doc = client.get("/openapi.json").json()
        documented = {(m.upper(), _shape(p)) for p, ops in doc["paths"].items() for m in ops}
        for route in app.routes:
            if isinstance(route, Mount) or UNDOCUMENTED.search(route.path):
                continue
            assert isinstance(route, Route), route
            for method in sorted(route.methods - {"HEAD"}):   # Starlette adds HEAD to GET
                key = (method, _shape(route.path))
                if key in documented:
                    continue
                record = records.get(key)
                if record is None or record.serves(task):
                    unrecorded.append(f"{method} {route.path}")
                elif method == "GET":   # another task's route refuses this export
                    path = re.sub(r"\{[^}]*\}", "m", route.path)
                    if client.get(path).status_code == 200:
                        answered.append(f"{method} {route.path}")
    assert not unrecorded, (f"served but in no /openapi.json (give each an Endpoint record in "
                            f"runtime/server/app.ENDPOINTS): {unrecorded}")
    assert not answered, f"answered on a {task} export, but not in its document: {answered}"


def test_several_models_keep_their_document(ours):
    """Two models in one app (an embedder, a cross-encoder): the merged document, fuzzed."""
    from pathlib import Path

    from bertonnx.runtime.server.registry import ModelSource

    pipes = {"emb": ours("feature-extraction"), "rank": ours("text-ranking")}
    app = create_app([ModelSource(n, Path("unused"), lambda p=p: p) for n, p in pipes.items()],
                     ServeOptions())
    try:
        with ASGIClient(app) as client:
            deadline = time.monotonic() + 10
            while client.get("/health").status_code != 200:
                assert time.monotonic() < deadline, "the models did not load"
                time.sleep(0.01)
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        operations = [result.ok() for result in schema.get_all_operations()]
        found = [_fuzz(op, GenerationMode.POSITIVE) for op in operations]
        found += [_fuzz(op, GenerationMode.NEGATIVE) for op in operations
                  if {"requestBody", "parameters"} & set(op.definition.raw)]
        found = [f for f in found if f is not None]
        assert not found, "\n\n".join(found)
    finally:
        shutdown_lifespans()
