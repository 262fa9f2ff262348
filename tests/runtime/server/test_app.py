"""The server app in-process (Starlette's TestClient), for what a subprocess cannot show:
readiness while the model loads, a 500 that leaks nothing, a load failure, and the metrics
text format. The pipelines here are stand-ins (_helpers.py's EchoPipeline); real models are
in test_server.py."""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.server import ClientError, allowed_parameters, create_app, parse_request

from tests.runtime.server._helpers import EchoPipeline, TestClient, wait_ready


def test_health_is_503_until_the_model_is_loaded():
    gate = threading.Event()

    def slow_loader():
        gate.wait(10)
        return EchoPipeline()

    with TestClient(create_app("unused", loader=slow_loader)) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        r = client.post("/predict", json={"inputs": "x"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "bertonnx_model_ready 0" in client.get("/metrics").text
        gate.set()
        wait_ready(client)
        assert client.get("/health").json() == {"status": "ok", "task": "fill-mask"}
        assert client.post("/predict", json={"inputs": "x"}).json() == \
            [{"token_str": "X", "score": 0.5, "top_k": 5}]
        assert "bertonnx_model_ready 1" in client.get("/metrics").text


def test_internal_errors_leak_nothing():
    with TestClient(create_app("unused", loader=EchoPipeline)) as client:
        wait_ready(client)
        r = client.post("/predict", json={"inputs": "boom"})
        assert r.status_code == 500
        body = r.json()
        assert body["type"] == "InternalError"
        assert re.fullmatch(r"internal error [0-9a-f]{12}; see the server log", body["error"])
        assert "secret" not in r.text and "Traceback" not in r.text and "passwd" not in r.text
        # the library's own errors are the client's fault: 400 with the message
        r = client.post("/predict", json={"inputs": " "})
        assert r.status_code == 400 and r.json()["type"] == "InputError"
        assert "text is empty" in r.json()["error"]


def test_load_failure_is_reported_and_stops_the_server():
    stopped = []

    def broken():
        raise ArtifactError("model.onnx is damaged", "export again")

    with TestClient(create_app("unused", loader=broken, on_fatal=lambda: stopped.append(1))) as client:
        deadline = time.monotonic() + 10
        while not stopped:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "failed"
        assert "damaged" in r.json()["error"]
        assert client.post("/predict", json={"inputs": "x"}).json()["error"] == \
            "the model failed to load"


def test_metrics_are_prometheus_text():
    with TestClient(create_app("unused", loader=EchoPipeline)) as client:
        wait_ready(client)
        for _ in range(3):
            client.post("/predict", json={"inputs": ["a", "b"]})
        client.post("/predict", content=b"nope")
        r = client.get("/metrics")
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = r.text
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) bertonnx_\w+ .+", line), line
            continue
        name, value = line.rsplit(" ", 1)
        assert re.fullmatch(r'bertonnx_\w+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})?', name), line
        samples[name] = float(value)
    assert samples['bertonnx_requests_total{status="200"}'] == 3
    assert samples['bertonnx_requests_total{status="400"}'] == 1
    assert samples["bertonnx_request_duration_seconds_count"] == 4
    assert samples['bertonnx_request_duration_seconds_bucket{le="+Inf"}'] == 4
    assert samples["bertonnx_batch_size_count"] == 3 and samples["bertonnx_batch_size_sum"] == 6
    assert samples['bertonnx_batch_size_bucket{le="1"}'] == 0
    assert samples['bertonnx_batch_size_bucket{le="2"}'] == 3
    assert samples["bertonnx_batch_size_max"] == 2
    # histogram buckets are cumulative
    buckets = [v for k, v in samples.items() if k.startswith("bertonnx_request_duration_seconds_bucket")]
    assert buckets == sorted(buckets)


def test_allowed_parameters_come_from_the_task_record():
    assert allowed_parameters(EchoPipeline()) == frozenset({"top_k", "targets"})
    # batching is the server's; arrays mean nothing in JSON
    assert "batch_size" not in allowed_parameters(type("P", (), {"task": "text-classification"}))
    assert allowed_parameters(type("P", (), {"task": "feature-extraction"})) == frozenset(
        {"pooling", "normalize", "dimensions", "prompt_name", "prompt", "truncation_direction",
         "long_inputs"})


@pytest.mark.parametrize("task, inputs, ok", [
    ("question-answering", {"question": "q", "context": "c"}, True),
    ("question-answering", {"question": "q"}, False),
    ("question-answering", {"question": "q", "context": "c", "x": 1}, False),
    ("question-answering", "text", False),
    ("text-classification", {"text": "a", "text_pair": "b"}, True),
    ("text-classification", [["a", "b"]], True),
    ("text-classification", ["a", ["b"]], False),
    ("text-classification", {"text_pair": "b"}, False),
    ("fill-mask", {"text": "a"}, False),
    ("fill-mask", [["a"]], False),
    ("feature-extraction", ["a", "b"], True),
    ("token-classification", None, False),
])
def test_input_shapes(task, inputs, ok):
    body = json.dumps({"inputs": inputs}).encode()
    if ok:
        parsed = parse_request(task, body, None)
        assert parsed.single == (not isinstance(inputs, list))
    else:
        with pytest.raises(ClientError) as e:
            parse_request(task, body, None)
        assert e.value.status == 400


@pytest.mark.parametrize("batch, calls", [
    # defaults: parts of 32 (the fairness unit), batches up to 128 — one request alone runs
    # part by part
    ({}, [32, 32, 32, 4]),
    ({"part_size": 50}, [50, 50]),
    # a part is never wider than a batch: --max-batch-size 8 alone still means parts of 8
    ({"max_batch_size": 8}, [8] * 12 + [4]),
])
def test_a_request_runs_in_parts_of_the_part_size(batch, calls):
    from bertonnx.runtime.server import ServeOptions
    from bertonnx.runtime.server.batching import BatchConfig

    options = ServeOptions(batch=BatchConfig(**batch))
    with TestClient(create_app("unused", options, loader=EchoPipeline)) as client:
        wait_ready(client)
        r = client.post("/predict", json={"inputs": [f"text {i}" for i in range(100)]})
        assert r.status_code == 200 and len(r.json()) == 100
        metrics = client.get("/metrics").text
    count = float(re.search(r"^bertonnx_batch_size_count (\S+)$", metrics, re.M).group(1))
    total = float(re.search(r"^bertonnx_batch_size_sum (\S+)$", metrics, re.M).group(1))
    widest = float(re.search(r"^bertonnx_batch_size_max (\S+)$", metrics, re.M).group(1))
    assert (count, total, widest) == (len(calls), 100, max(calls))
