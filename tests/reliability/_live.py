"""What the tests against a live `bertonnx serve` on 127.0.0.1 share (issue 17's server items:
test_server_limits.py, test_server_isolation.py, test_server_connections.py; the servers
themselves are tests/live_server.py's, their fixtures conftest.py's).

Nothing in those tests asserts a duration or races a sleep. Where a test needs requests to be
*queued* at a moment, it makes that true by construction and waits for /metrics to show it —
the hold (`held`): a request whose body stops half-way is "arriving" (app.py) for
--max-wait-ms after its last bytes, so with --max-wait-ms 60000 the batch being formed waits
for company (bertonnx_queue_depth counts it) until that upload completes; the test completes it.
Servers are shared per flag set (a module fixture each) and killed at the end. Every loop is
bounded (live_server.GUARD_S).
"""
from __future__ import annotations

import json
import threading

import httpx

from tests.live_server import LiveServer, Raw

# fill-mask with small limits; --max-wait-ms 60000 makes the hold possible; header and
# keep-alive timeouts long, so idle sockets stay counted for the connection cap.
LIMITS = dict(max_batch_size=4, max_inputs=16, max_tokens=200, max_answers=50,
              max_body_bytes=4096, max_connections=12)
LIMITS_FLAGS = ["--max-batch-size", 4, "--max-wait-ms", 60000, "--max-inputs", 16,
                "--max-tokens", 200, "--max-answers", 50, "--max-body-bytes", 4096,
                "--max-connections", 12, "--header-timeout-s", 60, "--keep-alive-s", 60]
# fill-mask with short client timeouts
TIMEOUT_FLAGS = ["--header-timeout-s", 0.5, "--body-timeout-s", 1, "--keep-alive-s", 0.5]
# question-answering with a 30,522-token vocabulary: each tokenizer copy is ~6 MB, as MiniLM's
QA_FLAGS = ["--max-context-chars", 2000, "--max-answers", 20]


def serving(argv):
    """A fixture's body: the server on `argv`, killed when the fixture ends."""
    server = LiveServer(argv)
    try:
        yield server
    finally:
        server.kill()


def in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    """Run fn(*args) on a thread; its result lands in the returned dict's "r"."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args)), daemon=True)
    t.start()
    return t, out


def status_error(response: httpx.Response | tuple) -> tuple[int, dict]:
    """(status, JSON error body) of a refusal, from httpx or from a Raw connection."""
    if isinstance(response, tuple):
        return response[0], json.loads(response[2])
    return response.status_code, response.json()


def held(server: LiveServer) -> tuple[Raw, bytes]:
    """The hold: an upload stopped after 5 bytes, seen by the server. Completing it
    (`raw.send(body[5:])`) releases the batch being formed."""
    before = server.metric("bertonnx_in_flight_requests")
    raw = Raw(server)
    body = raw.post({"inputs": "the dog [MASK] ."}, upto=5)
    server.until(lambda: server.metric("bertonnx_in_flight_requests") == before + 1,
                 "the held upload never reached the server")
    return raw, body


def model_calls(server: LiveServer) -> tuple[int, int, int]:
    """(model calls, requests in them, inputs in them) so far."""
    m = server.metrics()
    return (int(m["bertonnx_batch_requests_count"]), int(m["bertonnx_batch_requests_sum"]),
            int(m["bertonnx_batch_size_sum"]))


def no_5xx(server: LiveServer) -> None:
    """The server answered no 5xx so far and logged no traceback."""
    m = server.metrics()
    assert not [k for k in m if k.startswith('bertonnx_requests_total{status="5')], m
    assert "Traceback" not in server.log, server.log
