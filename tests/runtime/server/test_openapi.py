"""/openapi.json and /docs: the document is valid OpenAPI 3.1 for every task's export, lists
exactly the routes the export answers, carries the task record's parameters (types, bounds,
defaults), and every example body in it is answered 200 by the server; /docs is Swagger UI
served by the server itself, loaded in a real headless browser (Debian's chromium, driven by
playwright, nothing downloaded), where "Try it out" on /embed returns a vector.
"""
from __future__ import annotations

import json
import shutil

import httpx
import pytest

from bertonnx.runtime.core.parameters import MAX_TOP_K
from bertonnx.runtime.server import ServeOptions, create_app
from bertonnx.runtime.server.app import ENDPOINTS

from tests.runtime._threaded_server import threaded_server
from tests.runtime.server._helpers import TestClient, wait_ready

TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction", "text-ranking", "sparse-embedding", "zero-shot-classification")
CHROMIUM = shutil.which("chromium")   # Debian's (the Makefile's `browser` installs it)


@pytest.fixture(params=TASKS)
def task(request, ours):
    ours(request.param)   # exported and loaded in the fixture: the test's time is its own
    return request.param


def test_the_document_is_the_export(task, ours):
    validator = pytest.importorskip("openapi_spec_validator")
    jsonschema = pytest.importorskip("jsonschema")
    pipe = ours(task)
    with TestClient(create_app("unused", ServeOptions(name="m"), loader=lambda: pipe)) as client:
        wait_ready(client)
        doc = client.get("/openapi.json").json()
        validator.validate(doc)
        assert doc["openapi"] == "3.1.0"
        served = {(e.method.lower(), e.path) for e in ENDPOINTS if e.serves(task)}
        assert {(m, p) for p, ops in doc["paths"].items() for m in ops} == served
        # every GET in it answers; every example body validates against its schema and is
        # answered
        for path, ops in doc["paths"].items():
            if "get" in ops:
                assert client.get(_filled(path, ops["get"])).status_code == 200, path
            body = ops.get("post", {}).get("requestBody", {}).get("content", {}).get(
                "application/json")
            if body is None:
                continue
            if "example" not in body:   # only text-ranking's /v2 has none: its rows are pairs
                assert task == "text-ranking" and path.endswith("/infer"), path
                continue
            jsonschema.Draft202012Validator(body["schema"]).validate(body["example"])
            answer = client.post(_filled(path, ops["post"]), json=body["example"])
            assert answer.status_code == 200, (path, answer.text)
    params = doc["paths"]["/predict"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]["parameters"]["properties"]
    assert set(params) == {p.name for p in pipe.spec.params if p.request}
    for name, schema in params.items():
        assert schema["description"] == pipe.spec.parameters[name].help


def _filled(path: str, op: dict) -> str:
    """`path` with each parameter at the one value its schema allows (the model, version 1)."""
    for p in op.get("parameters", ()):
        path = path.replace("{%s}" % p["name"], p["schema"]["enum"][0])
    return path


def test_the_record_gives_the_schema(ours):
    """Types, bounds (a model's own at its value), defaults, options and null."""
    def params(task):
        pipe = ours(task)
        with TestClient(create_app("unused", loader=lambda: pipe)) as client:
            wait_ready(client)
            doc = client.get("/openapi.json").json()
        return pipe, doc["paths"]["/predict"]["post"]["requestBody"]["content"][
            "application/json"]["schema"]["properties"]["parameters"]["properties"]

    _, fm = params("fill-mask")
    assert fm["top_k"]["type"] == "integer" and fm["top_k"]["default"] == 5
    assert (fm["top_k"]["minimum"], fm["top_k"]["maximum"]) == (1, MAX_TOP_K)
    qa_pipe, qa = params("question-answering")
    seq = qa["max_seq_len"]["anyOf"]
    assert seq[0]["maximum"] == qa_pipe.max_length and seq[1] == {"type": "null"}
    assert qa["handle_impossible_answer"] == {
        "type": "boolean", "description": qa_pipe.spec.parameters["handle_impossible_answer"].help,
        "default": False, "examples": [True]}
    _, tokens = params("token-classification")
    assert tokens["aggregation_strategy"]["enum"] == ["none", "simple", "first", "average", "max"]


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (make browser, as root)")
def test_docs_page_in_a_headless_browser(ours):
    sync_api = pytest.importorskip("playwright.sync_api")
    pipe = ours("feature-extraction")
    with threaded_server(pipe, "tiny-embed") as url, sync_api.sync_playwright() as p:
        paths = set(httpx.get(url + "/openapi.json", timeout=30).json()["paths"])
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            outside = []   # the page must need nothing but this server
            page.on("request", lambda r: r.url.startswith(url) or outside.append(r.url))
            page.goto(url + "/docs")
            page.wait_for_selector(".opblock-summary-path", timeout=15_000)
            listed = set(page.locator(".opblock-summary-path").evaluate_all(
                "nodes => nodes.map(n => n.getAttribute('data-path'))"))
            assert listed == paths and "/embed" in listed
            embed = page.locator('.opblock-post:has(.opblock-summary-path[data-path="/embed"])')
            embed.locator(".opblock-summary").click()
            embed.locator("button.execute").click()
            answer = embed.locator(".live-responses-table .response-col_description pre")
            answer.first.wait_for(timeout=15_000)
            vectors = json.loads(answer.first.inner_text())
            assert vectors == [pipe("What is Deep Learning?")]   # the page's example body
            assert outside == []
        finally:
            browser.close()
