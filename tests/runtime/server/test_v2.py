"""The Open Inference Protocol v2 with the real `tritonclient.http` against bertonnx's server.

One `bertonnx serve` process for the module (a tiny text-classification export, `--name
sentiment`) covers the protocol: health, metadata, JSON and binary tensors both ways, requested
outputs, ids, parameters and refusals. The other tasks' tensors are checked on the same app
on uvicorn in a thread (tests/runtime/_threaded_server.py) serving the session's loaded
pipelines. Every request here runs alone, so its numbers are the library's exactly (float32).
"""
from __future__ import annotations

import json
import threading

import httpx
import numpy as np
import pytest

from bertonnx.runtime.server import ServeOptions, create_app

from tests.live_server import LiveServer
from tests.runtime._threaded_server import threaded_server
from tests.runtime.server._helpers import TestClient, jsonable, wait_ready

triton = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

NAME = "sentiment"
MAX_INPUTS = 8
CONTEXT = ("the cat sat on the mat . the dog ran to the river in paris . "
           "london is a city with music and film .")


@pytest.fixture(scope="module")
def server(tiny_export):
    with LiveServer.serve(tiny_export("text-classification"), "--name", NAME,
                       "--max-inputs", str(MAX_INPUTS)) as s:
        yield s
        assert s.terminate() == 0, s.log


def connect(url: str):
    return triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=60)


@pytest.fixture(scope="module")
def client(server):
    c = connect(server.url)
    yield c
    c.close()


def texts_in(name: str, texts, binary: bool = False, datatype: str = "BYTES"):
    array = np.array(texts, dtype=object if datatype == "BYTES" else np.int64)
    tensor = triton.InferInput(name, list(array.shape), datatype)
    return tensor.set_data_from_numpy(array, binary_data=binary)


def wanted(*names: str, binary: bool = False):
    return [triton.InferRequestedOutput(n, binary_data=binary) for n in names]


def strings(array) -> list:
    """A BYTES output as str: JSON gives str elements, binary data bytes."""
    return [x.decode() if isinstance(x, bytes) else x for x in array.reshape(-1)]


def refused(call, status: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        call()
    assert e.value.status() == status, (e.value.status(), e.value.message())
    assert message in e.value.message(), e.value.message()


# -- the protocol, on `bertonnx serve` -------------------------------------------------------


def test_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(NAME) and not client.is_model_ready("other")
    assert client.is_model_ready(NAME, model_version="1")
    meta = client.get_server_metadata()
    assert meta["name"] == "bertonnx" and "binary_tensor_data" in meta["extensions"]
    assert client.get_model_metadata(NAME) == {
        "name": NAME, "versions": ["1"], "platform": "bertonnx_onnxruntime",
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]},
                   {"name": "text_pair", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": "label", "datatype": "BYTES", "shape": [-1]},
                    {"name": "score", "datatype": "FP32", "shape": [-1]}]}
    refused(lambda: client.get_model_metadata("other"), "404", "serves 'sentiment'")


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_classification_equals_the_library(client, ours, binary):
    """Texts and pairs (an empty text_pair element: no pair), JSON or binary tensors both
    ways; label and score equal the library's; the id comes back; parameters reach the
    pipeline."""
    pipe = ours("text-classification")
    texts, pairs = ["happy music", "the dog ran", "sad film"], ["", "to the river", ""]
    inputs = [texts_in("text", texts, binary), texts_in("text_pair", pairs, binary)]
    library = [t if not p else {"text": t, "text_pair": p} for t, p in zip(texts, pairs)]
    for params in ({}, {"function_to_apply": "sigmoid"}):
        want = pipe(library, **params)
        got = client.infer(NAME, inputs, outputs=wanted("label", "score", binary=binary),
                           request_id="req-7", parameters=params or None)
        assert got.get_response()["id"] == "req-7"
        assert got.get_response()["model_name"] == NAME
        assert strings(got.as_numpy("label")) == [w["label"] for w in want]
        np.testing.assert_array_equal(got.as_numpy("score"),
                                      np.array([w["score"] for w in want], np.float32))
    # no outputs named: tritonclient asks for every output as binary data
    got = client.infer(NAME, [texts_in("text", texts, binary)])
    assert [o["name"] for o in got.get_response()["outputs"]] == ["label", "score"]
    assert all("binary_data_size" in o["parameters"] for o in got.get_response()["outputs"])
    assert strings(got.as_numpy("label")) == [w["label"] for w in pipe(texts)]


def test_requested_outputs_only(client):
    got = client.infer(NAME, [texts_in("text", ["a cat", "a dog"])], outputs=wanted("score"))
    assert [o["name"] for o in got.get_response()["outputs"]] == ["score"]
    assert got.as_numpy("label") is None and got.as_numpy("score").shape == (2,)


def test_refusals(client, server):
    ok = [texts_in("text", ["a cat"])]
    refused(lambda: client.infer("other", ok), "404", "unknown model 'other'")
    refused(lambda: client.infer(NAME, ok, model_version="2"), "404", "version '2'")
    refused(lambda: client.infer(NAME, [texts_in("txt", ["a"])]), "400", "unknown input 'txt'")
    refused(lambda: client.infer(NAME, [texts_in("text", [1, 2], datatype="INT64")]), "400",
            "must be BYTES")
    refused(lambda: client.infer(NAME, [texts_in("text_pair", ["a"])]), "400",
            "needs the input(s) text")
    refused(lambda: client.infer(NAME, [texts_in("text", ["a", "b"]),
                                        texts_in("text_pair", ["c"])]), "400",
            "different numbers of elements")
    refused(lambda: client.infer(NAME, [texts_in("text", ["fine", " "])]), "400", "empty")
    refused(lambda: client.infer(NAME, ok, parameters={"top_k": 2}), "400",
            "unknown parameters ['top_k']")
    refused(lambda: client.infer(NAME, ok, parameters={"function_to_apply": "cube"}), "400",
            "function_to_apply")
    refused(lambda: client.infer(NAME, ok, outputs=wanted("logits")), "400",
            "unknown output 'logits'")
    refused(lambda: client.infer(NAME, [texts_in("text", ["a"] * (MAX_INPUTS + 1))]), "413",
            "--max-inputs")
    r = httpx.post(server.url + f"/v2/models/{NAME}/infer", content=b"{nope", timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
    r = httpx.post(server.url + f"/v2/models/{NAME}/infer", timeout=30, json={
        "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["a"]}]})
    assert r.status_code == 400 and "1 elements for shape [2]" in r.json()["error"]
    r = httpx.get(server.url + "/v2/repository/index", timeout=30)
    assert r.status_code == 404 and "error" in r.json()
    # the server is fine afterwards, and counted the refusals with the other routes'
    assert client.infer(NAME, ok).as_numpy("score").shape == (1,)
    m = server.metrics()
    assert m['bertonnx_requests_total{status="404"}'] >= 2
    assert m['bertonnx_requests_total{status="413"}'] >= 1
    assert "Traceback" not in server.log


# -- each task's tensors, on the app in a thread ---------------------------------------------


def test_fill_mask_tensors(ours):
    pipe = ours("fill-mask")
    texts = ["the cat sat on the [MASK] .", "paris is a [MASK] ."]
    want = pipe(texts, top_k=3)
    with threaded_server(pipe, "mlm") as url:
        c = connect(url)
        assert c.get_model_metadata("mlm")["outputs"][0] == {
            "name": "token_str", "datatype": "BYTES", "shape": [-1, -1]}
        got = c.infer("mlm", [texts_in("text", texts, binary=True)], parameters={"top_k": 3})
        assert got.as_numpy("token_str").shape == (2, 3)
        assert strings(got.as_numpy("token_str")) == [p["token_str"] for r in want for p in r]
        assert strings(got.as_numpy("sequence")) == [p["sequence"] for r in want for p in r]
        np.testing.assert_array_equal(got.as_numpy("token"),
                                      [[p["token"] for p in r] for r in want])
        np.testing.assert_array_equal(got.as_numpy("score"),
                                      np.array([[p["score"] for p in r] for r in want],
                                               np.float32))
        refused(lambda: c.infer("mlm", [texts_in("text", ["the [MASK] sat on the [MASK]"])]),
                "400", "text #0 has 2 [MASK] tokens")
        refused(lambda: c.infer("mlm", [texts_in("text", ["no mask here"])]), "400",
                "no mask token")
        c.close()


def test_question_answering_tensors(ours):
    pipe = ours("question-answering")
    questions = ["where did the dog run ?", "what is london ?"]
    params = {"max_answer_len": 4}
    want = pipe([{"question": q, "context": CONTEXT} for q in questions], **params)
    with threaded_server(pipe, "qa") as url:
        c = connect(url)
        got = c.infer("qa", [texts_in("question", questions),
                             texts_in("context", [CONTEXT] * 2)], parameters=params,
                      outputs=wanted("answer", "score", "start", "end"))
        assert strings(got.as_numpy("answer")) == [w["answer"] for w in want]
        np.testing.assert_array_equal(got.as_numpy("score"),
                                      np.array([w["score"] for w in want], np.float32))
        assert got.as_numpy("start").tolist() == [w["start"] for w in want]
        assert got.as_numpy("end").tolist() == [w["end"] for w in want]
        assert got.as_numpy("start").dtype == np.int64
        refused(lambda: c.infer("qa", [texts_in("question", questions)]), "400",
                "needs the input(s) context")
        c.close()


def test_token_classification_tensors(ours):
    pipe = ours("token-classification")
    texts = ["paris is a city with a river", "london music"]
    want = jsonable(pipe(texts, aggregation_strategy="simple"))
    with threaded_server(pipe, "ner") as url:
        c = connect(url)
        got = c.infer("ner", [texts_in("text", texts, binary=True)],
                      parameters={"aggregation_strategy": "simple"})
        assert [json.loads(e) for e in strings(got.as_numpy("entities"))] == want
        c.close()


def test_feature_extraction_tensors(ours):
    pipe = ours("feature-extraction")
    texts = ["the cat sat", "a dog ran to the river in paris"]
    with threaded_server(pipe, "embed") as url:
        c = connect(url)
        width = np.asarray(pipe(texts[0])).shape[-1]
        assert c.get_model_metadata("embed")["outputs"] == [
            {"name": "embedding", "datatype": "FP32", "shape": [-1, width]}]
        for params, binary in (({}, False), ({"normalize": True, "pooling": "cls"}, True)):
            got = c.infer("embed", [texts_in("text", texts)], parameters=params or None,
                          outputs=wanted("embedding", binary=binary))
            np.testing.assert_array_equal(got.as_numpy("embedding"),
                                          np.array(pipe(texts, **params), np.float32))
        refused(lambda: c.infer("embed", [texts_in("text", texts)],
                                parameters={"pooling": "none"}), "400", "pooling")
        c.close()


def test_readiness_follows_the_model(ours):
    """Live at once; ready (server and model) only once the model is loaded; an inference
    request before then is a 503 in the protocol's error shape."""
    gate = threading.Event()
    pipe = ours("text-classification")
    app = create_app("unused", ServeOptions(name=NAME), loader=lambda: gate.wait(10) and pipe)
    with TestClient(app) as web:
        assert web.get("/v2/health/live").status_code == 200
        for path in ("/v2/health/ready", f"/v2/models/{NAME}/ready", f"/v2/models/{NAME}"):
            r = web.get(path)
            assert r.status_code == 503 and "loading" in r.json()["error"], path
        r = web.post(f"/v2/models/{NAME}/infer", json={"inputs": []})
        assert r.status_code == 503 and set(r.json()) == {"error"}
        assert web.get("/v2/models/other/ready").status_code == 404
        gate.set()
        wait_ready(web)
        assert web.get("/v2/health/ready").status_code == 200
        assert web.get(f"/v2/models/{NAME}/ready").json() == {"name": NAME, "ready": True}
