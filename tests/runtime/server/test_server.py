"""`bertonnx serve` end to end: a real server in a subprocess on 127.0.0.1, a free port.

Answers are compared with the library (`bertonnx.runtime.load`) on the same tiny exports:
requests sent one at a time run alone, so their JSON must be identical; requests merged into a
batch are padded with others, so their floats may move by float32 rounding — compared at
1e-5 absolute (strings, ints, labels and spans exactly).
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load

from tests.conftest import TASK_NAMES
from tests.live_server import LiveServer
from tests.runtime.server._helpers import BATCHED_ATOL, assert_close, jsonable

TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction")

CONTEXT = ("the cat sat on the mat . the dog ran to the river in paris . "
           "london is a city with music and film .")
# task -> requests (inputs, parameters) sent to the server and to the library.
CASES = {
    "fill-mask": [
        ("the cat sat on the [MASK] .", {}),
        ("the [MASK] sat on the [MASK] .", {"top_k": 3}),
        (["a [MASK] dog", "paris is a [MASK] ."], {"top_k": 2}),
        (["the [MASK] ran"], {"targets": ["cat", "dog", "house"]}),
    ],
    "text-classification": [
        ("the cat sat on the mat", {}),
        ("the cat sat on the mat", {"top_k": None}),
        ({"text": "the dog ran", "text_pair": "to the river"}, {}),
        (["happy music", {"text": "sad", "text_pair": "film"}, ["a", "b"]], {"top_k": 2}),
        (["one"], {"function_to_apply": "sigmoid"}),
    ],
    "question-answering": [
        ({"question": "where did the dog run ?", "context": CONTEXT}, {}),
        ({"question": "what is london ?", "context": CONTEXT}, {"top_k": 3}),
        ([{"question": "who sat ?", "context": CONTEXT},
          {"question": "what city ?", "context": CONTEXT}], {"max_answer_len": 4}),
        ({"question": "who ran ?", "context": CONTEXT * 4},
         {"max_seq_len": 32, "doc_stride": 8, "top_k": 2}),
    ],
    "token-classification": [
        ("paris is a city with a river", {}),
        (["london music", "the dog ran to the house"], {"aggregation_strategy": "simple"}),
        ("the cat sat", {"aggregation_strategy": "max", "ignore_labels": []}),
    ],
    "feature-extraction": [
        ("the cat sat", {}),
        (["a dog", "the river in paris"], {"normalize": True}),
        ("music and film", {"pooling": "none"}),
        ("music", {"pooling": "cls"}),
    ],
}


# -- exports ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipelines(ours):
    return {task: ours(task) for task in TASK_NAMES}


# -- requests and answers (the server: tests/live_server.py) --------------------------------


def post(url: str, body, **kw) -> httpx.Response:
    return httpx.post(url + "/predict", json=body, timeout=60, **kw)


def batch_stats(metrics: dict[str, float]) -> tuple[int, int, int]:
    """(pipeline calls, calls that merged > 1 request, largest batch in inputs)."""
    calls = int(metrics["bertonnx_batch_requests_count"])
    single = int(metrics['bertonnx_batch_requests_bucket{le="1"}'])
    return calls, calls - single, int(metrics["bertonnx_batch_size_max"])


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS)
def test_answers_equal_the_library(tiny_export, pipelines, task):
    """One at a time: identical JSON. 16 concurrent clients: all 200, merged into batches,
    each answer equal to the library's for its own request."""
    pipe = pipelines[task]
    with LiveServer.serve(tiny_export(task), "--max-wait-ms", "200") as server:
        health = httpx.get(server.url + "/health").json()
        assert health == {"status": "ok", "task": task}
        for inputs, params in CASES[task]:
            r = post(server.url, {"inputs": inputs, "parameters": params})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"] == "application/json"
            assert r.json() == jsonable(pipe(inputs, **params)), (inputs, params)

        # 16 clients at once, cycling through the cases (so some batches mix single inputs
        # with lists and two parameter sets), each checked against its own library answer.
        requests = [CASES[task][i % len(CASES[task])] for i in range(16)]

        async def burst():
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                return await asyncio.gather(*(
                    client.post("/predict", json={"inputs": x, "parameters": p})
                    for x, p in requests))

        calls_before = batch_stats(server.metrics())[0]
        responses = asyncio.run(burst())
        assert [r.status_code for r in responses] == [200] * 16, [r.text for r in responses]
        for (inputs, params), r in zip(requests, responses):
            assert_close(r.json(), jsonable(pipe(inputs, **params)), BATCHED_ATOL)
        calls, merged, _ = batch_stats(server.metrics())
        assert merged >= 1, "no pipeline call merged two requests"
        assert calls - calls_before < 16
        assert server.terminate() == 0, server.log


def test_load_concurrent_vs_sequential(tiny_export, pipelines):
    """Bounded loopback load: 2 × 80 requests one at a time, 2 × 80 from 16 concurrent clients.

    Asserts correctness and batches > 1; the throughput and latency figures are printed
    (pytest -s), never asserted.
    """
    figures = load_test(tiny_export("text-classification"), pipelines["text-classification"],
                        n=80, clients=16)
    print("\nserve load test (tiny text-classification):", json.dumps(figures, indent=1))
    assert figures["max_batch"] > 1
    assert figures["concurrent"]["merged_calls"] >= 1
    assert figures["sequential"]["merged_calls"] == 0   # one client never shares a call


class RawClient:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams, for the load test.

    httpx's client costs a few ms of CPU per request, which on a small machine would measure
    the client rather than the server; this one only writes the request and reads
    Content-Length bytes back. The sequential and the concurrent phases both use it.
    """

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def __aenter__(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc):
        self.writer.close()

    async def post(self, path: str, payload) -> tuple[int, bytes]:
        body = json.dumps(payload).encode()
        self.writer.write(b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host.encode(),
                                                             len(body), body))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        return status, await self.reader.readexactly(length)


def load_test(export_dir: Path, pipe, *, n: int, clients: int, rounds: int = 2, args=(),
              texts: list[str] | None = None) -> dict:
    """Sequential vs concurrent on one server, side by side; returns the figures.

    Sequential = one client, one request at a time; concurrent = `clients` clients each
    sending its next request as soon as the last is answered. The phases alternate
    (sequential, concurrent, sequential, ...) `rounds` times with n requests each, so a load
    spike on a shared machine hits both about equally.
    """
    texts = texts or [f"the {w} sat on the mat with the {v}" for w, v in
                      zip(["cat", "dog", "man", "city", "river", "team", "film", "game"] * 40,
                          ["house", "music", "water", "light", "dog", "cat", "name", "word"] * 40)]
    texts = texts[:n]
    want = [jsonable(pipe(t)) for t in texts]
    lat = {"sequential": [], "concurrent": []}
    wall = {"sequential": 0.0, "concurrent": 0.0}
    calls = {"sequential": 0, "concurrent": 0}
    merged = {"sequential": 0, "concurrent": 0}

    async def phase(server, name: str, n_clients: int):
        queue = list(range(len(texts)))[::-1]
        answers: dict[int, object] = {}

        async def worker():
            async with RawClient(server.host, server.port) as c:
                while queue:
                    i = queue.pop()
                    s = time.perf_counter()
                    status, body = await c.post("/predict", {"inputs": texts[i]})
                    lat[name].append(time.perf_counter() - s)
                    assert status == 200, body
                    answers[i] = json.loads(body)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(n_clients)))
        wall[name] += time.perf_counter() - t0
        for i, w in enumerate(want):
            if name == "sequential":
                assert answers[i] == w      # alone in its call: identical
            else:
                assert_close(answers[i], w, BATCHED_ATOL)

    with LiveServer.serve(export_dir, *args) as server:
        post(server.url, {"inputs": texts[0]})   # warm-up
        for _ in range(rounds):
            for name, n_clients in (("sequential", 1), ("concurrent", clients)):
                c0, m0, _ = batch_stats(server.metrics())
                asyncio.run(phase(server, name, n_clients))
                c1, m1, max_batch = batch_stats(server.metrics())
                calls[name] += c1 - c0
                merged[name] += m1 - m0
        assert server.terminate() == 0

    def pct(xs, q):
        xs = sorted(xs)
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 2)

    total = rounds * len(texts)
    return {"requests_per_phase": total, "clients": clients, "server_args": list(args),
            "max_batch": max_batch,
            **{name: {"req_per_s": round(total / wall[name], 1),
                      "p50_ms": pct(lat[name], 0.5), "p95_ms": pct(lat[name], 0.95),
                      "pipeline_calls": calls[name], "merged_calls": merged[name],
                      "mean_inputs_per_call": round(total / max(1, calls[name]), 2)}
               for name in ("sequential", "concurrent")}}


@pytest.mark.slow
def test_load_minilm(minilm_dir, tmp_path):
    """The same load test on the real MiniLM encoder (feature-extraction), figures printed."""
    out = tmp_path / "minilm"
    export_model(minilm_dir, "feature-extraction", out, ExportOptions(parity=False))
    figures = load_test(out, load(out), n=80, clients=16)
    print("\nserve load test (MiniLM feature-extraction):", json.dumps(figures, indent=1))
    assert figures["max_batch"] > 1


MALFORMED = [
    (b"{not json", 400, "not valid JSON"),
    (b"\xff\xfe", 400, "not valid JSON"),
    (b"[1, 2]", 400, "JSON object"),
    (b'{"parameters": {}}', 400, 'lacks "inputs"'),
    (b'{"inputs": "x", "extra": 1}', 400, "unknown body fields"),
    (b'{"inputs": 42}', 400, "wrong shape"),
    (b'{"inputs": []}', 400, "empty list"),
    (b'{"inputs": ["ok", 3]}', 400, "item 1"),
    (b'{"inputs": {"question": "q", "context": "c"}}', 400, "wrong shape"),
    (b'{"inputs": "x", "parameters": [1]}', 400, "JSON object"),
    (b'{"inputs": "x", "parameters": {"temperature": 1}}', 400, "unknown parameters"),
    (b'{"inputs": "x", "parameters": {"top_k": -1}}', 400, "top_k"),
    (b'{"inputs": "x", "parameters": {"function_to_apply": "cube"}}', 400, "function_to_apply"),
    (b'{"inputs": ""}', 400, "empty"),
    (b'{"inputs": "' + b"word " * 600 + b'"}', 413, "over the limit"),
    (b"[" * 100_000 + b"]" * 100_000, 413, "over the limit"),
    (b"[" * 1000 + b"]" * 1000, 400, "JSON"),   # too deep, or a list: either way 400
]


def test_malformed_requests_get_4xx_json(tiny_export):
    with LiveServer.serve(tiny_export("text-classification"), "--max-body-bytes", "2048") as server:
        for body, status, message in MALFORMED:
            r = httpx.post(server.url + "/predict", content=body, timeout=30,
                           headers={"content-type": "application/json"})
            assert r.status_code == status, (body[:60], r.text)
            err = r.json()
            assert message in err["error"], (body[:60], err)
            assert "Traceback" not in r.text
        r = httpx.get(server.url + "/predict")
        assert r.status_code == 405 and "error" in r.json()
        r = httpx.get(server.url + "/nowhere")
        assert r.status_code == 404 and "error" in r.json()
        # a chunked body (no Content-Length) over the limit is cut off too
        r = httpx.post(server.url + "/predict", content=iter([b'{"inputs": "', b"x" * 4096, b'"}']))
        assert r.status_code == 413
        # the server is still fine afterwards, and counted every status
        assert post(server.url, {"inputs": "good"}).status_code == 200
        m = server.metrics()
        assert m['bertonnx_requests_total{status="400"}'] == sum(s == 400 for _, s, _ in MALFORMED)
        assert m['bertonnx_requests_total{status="413"}'] == 3
        assert m['bertonnx_requests_total{status="200"}'] == 1
        assert server.terminate() == 0


def test_sigterm_drains_in_flight_requests(tiny_export, pipelines):
    """SIGTERM while 8 requests wait in the batcher and a 9th is still uploading its body:
    all 9 are answered, then the server exits 0 and stops listening.

    The half-sent request also keeps the batcher waiting for company (it is "arriving"), so
    the 8 stay queued for --max-wait-ms — in flight when the signal lands.
    """
    pipe = pipelines["fill-mask"]
    texts = [f"the [MASK] sat on the {w} ." for w in ("mat", "house", "river", "city", "dog",
                                                      "film", "game", "team", "water")]
    with LiveServer.serve(tiny_export("fill-mask"), "--max-wait-ms", "3000") as server:
        slow = socket.create_connection((server.host, server.port))
        body = json.dumps({"inputs": texts[8]}).encode()
        slow.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:10]))
        results: dict[int, httpx.Response] = {}

        def client(i):
            results[i] = post(server.url, {"inputs": texts[i]})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while server.metrics()["bertonnx_in_flight_requests"] < 9:
            assert time.monotonic() < deadline, "requests never arrived"
            time.sleep(0.02)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        slow.sendall(body[10:])              # the upload finishes after the signal
        slow.settimeout(60)
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"(?i)content-length: *(\d+)", reply).group(1)):
            chunk = slow.recv(65536)
            assert chunk, f"connection closed early: {reply[:200]!r}"
            reply += chunk
        slow.close()
        code = server.proc.wait(60)
        for t in threads:
            t.join(30)
        assert code == 0, server.log
        head, _, payload = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), reply[:200]
        assert_close(json.loads(payload), jsonable(pipe(texts[8])), BATCHED_ATOL)
        assert sorted(results) == list(range(8))
        for i, r in results.items():
            assert r.status_code == 200
            assert_close(r.json(), jsonable(pipe(texts[i])), BATCHED_ATOL)
        assert "Traceback" not in server.log
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url + "/health", timeout=5)


def test_binds_loopback_by_default(tiny_export):
    with LiveServer.serve(tiny_export("feature-extraction")) as server:
        assert server.host == "127.0.0.1"
        assert server.terminate() == 0


def test_cli_errors_are_one_line(tmp_path, tiny_export):
    def run(*args):
        p = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "serve", *args],
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stderr

    code, err = run(str(tmp_path / "missing"))
    assert code != 0 and err.count("\n") == 1 and "does not exist" in err, err
    with LiveServer.serve(tiny_export("fill-mask")) as server:
        code, err = run(str(tiny_export("fill-mask")), "--port", str(server.port))
        assert code != 0 and err.count("\n") == 1 and "cannot listen" in err, err
        assert server.terminate() == 0
    code, err = run(str(tiny_export("fill-mask")), "--max-batch-size", "0")
    assert code != 0 and "Traceback" not in err
