"""Connections to a live `bertonnx serve` (issue 17; helpers in _live.py): the cap and the
descriptor limit behind it, the timeouts that close stalled clients and idle keep-alives, a
stalled upload that never holds a batch, and a SIGTERM drain that outlasts its timeout (the
drain server is the test's own).
"""
from __future__ import annotations

import json
import signal
import threading

from tests.conftest import FM
from tests.live_server import GUARD_S, LiveServer, Raw, serve_argv

from ._live import LIMITS, held, model_calls, no_5xx
from .conftest import one_error_line

# -- connections: the cap, and the timeouts that close stalled ones --------------------------


def test_past_max_connections_a_new_one_gets_503_at_connect(limits_server):
    server, cap = limits_server, LIMITS["max_connections"]
    with Raw(server) as watch:       # one keep-alive connection reads /metrics throughout

        def gauge(name):
            status, _, text = watch.get("/metrics")
            assert status == 200
            return next(float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
                        if line.startswith(name + " "))

        refused = gauge("bertonnx_connections_refused_total")
        server.until(lambda: gauge("bertonnx_open_connections") == 1, "connections linger")
        idle = [Raw(server) for _ in range(cap - 1)]
        try:
            server.until(lambda: gauge("bertonnx_open_connections") == cap,
                         "the idle connections were never counted")
            with Raw(server) as extra:
                status, headers, text = extra.response()
                assert status == 503 and headers["retry-after"] == "1", text
                assert "--max-connections" in json.loads(text)["error"]
                assert extra.closed_by_server()
            assert gauge("bertonnx_connections_refused_total") == refused + 1
        finally:
            for raw in idle:
                raw.close()
        server.until(lambda: gauge("bertonnx_open_connections") == 1, "connections linger")
    assert server.predict("the [MASK] .").status_code == 200


def test_a_cap_past_the_descriptor_limit_is_one_line(tiny_export, run_cli):
    """The cap is kept below the file-descriptor limit (raised to fit at start): a cap that
    cannot fit is refused before the server starts."""
    proc = run_cli("serve", tiny_export(FM), "--port", 0, "--max-connections", 2_000_000_000)
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert "--max-connections 2000000000 needs" in line and "ulimit" in line, line


def test_stalled_clients_are_timed_out_and_their_connections_closed(timeouts_server):
    """20 stalled clients (silent, half a request line, headers a byte at a time, half a
    body): each gets its 408 naming the flag and is closed; afterwards the open-connection
    gauge and the process's descriptors are back where they were."""
    server = timeouts_server
    metrics_before = server.metrics()
    fds_before = server.open_fds()
    silent = [Raw(server) for _ in range(8)]
    half_line = [Raw(server) for _ in range(4)]
    trickle = [Raw(server) for _ in range(4)]
    half_body = [Raw(server) for _ in range(4)]
    stop = threading.Event()
    for raw in half_line:
        raw.send(b"POST /pre")
    for raw in half_body:
        raw.post({"inputs": "the cat [MASK] ."}, upto=6)

    def drip(raw):   # one header byte at a time, until the server closes the connection
        for byte in b"POST /predict HTTP/1.1\r\nHost: x\r\n" * 20:
            if stop.wait(0.02):
                return
            try:
                raw.send(bytes([byte]))
            except OSError:
                return

    drips = [threading.Thread(target=drip, args=(raw,), daemon=True) for raw in trickle]
    for t in drips:
        t.start()
    try:
        for raw in silent + half_line + trickle:
            status, headers, text = raw.response()
            assert status == 408 and "--header-timeout-s" in json.loads(text)["error"]
            assert raw.closed_by_server()
        for raw in half_body:
            status, headers, text = raw.response()
            assert status == 408 and "--body-timeout-s" in json.loads(text)["error"]
            assert headers["connection"] == "close" and raw.closed_by_server()
    finally:
        stop.set()
        for raw in silent + half_line + trickle + half_body:
            raw.close()
    server.until(lambda: server.metric("bertonnx_open_connections") == 1
                 and server.open_fds() == fds_before, "stalled connections stayed open")
    after = server.metrics()
    for stage, n in (("header", 16), ("body", 4)):
        key = f'bertonnx_timeouts_total{{stage="{stage}"}}'
        assert after[key] - metrics_before.get(key, 0) == n
    assert server.predict("the [MASK] .").status_code == 200
    no_5xx(server)


def test_an_idle_keep_alive_connection_is_closed(timeouts_server):
    with Raw(timeouts_server) as raw:
        assert raw.get("/health")[0] == 200
        assert raw.closed_by_server()   # after --keep-alive-s, with nothing sent


def test_a_stalled_upload_never_holds_a_batch(emb_server):
    """An upload stopped half-way (default --max-wait-ms, --body-timeout-s 30): another
    request is answered, in a call of its own, while that upload is still open and before
    it could time out."""
    server = emb_server
    hold, body = held(server)
    with hold:
        calls_before = model_calls(server)
        r = server.predict("the cat sat")
        assert r.status_code == 200
        assert tuple(a - b for a, b in zip(model_calls(server), calls_before)) == (1, 1, 1)
        assert server.metric('bertonnx_timeouts_total{stage="body"}') == 0   # still open
        assert server.metric("bertonnx_in_flight_requests") == 1            # (the upload)
        hold.send(body[5:])
        assert hold.response()[0] == 200



# -- SIGTERM drain ---------------------------------------------------------------------------


def test_a_drain_past_its_timeout_answers_503_and_exits_1(tiny_export):
    """Three requests provably queued (queue depth 3, held by an upload in progress and
    --max-wait-ms 60000, so their batch cannot start for a minute) when SIGTERM arrives with
    --drain-timeout-s 1: at the drain timeout each of them, and the upload, gets 503
    naming the flag, and the server exits 1 with one line saying so."""
    server = LiveServer(serve_argv(tiny_export(FM), "--max-wait-ms", 60000,
                                   "--drain-timeout-s", 1))
    try:
        hold, _ = held(server)
        queued = [Raw(server) for _ in range(3)]
        for raw, text in zip(queued, ["the cat [MASK] .", "a [MASK] dog", "the [MASK] ran"]):
            raw.post({"inputs": text})
        server.until(lambda: server.metric("bertonnx_queue_depth") == 3,
                     "the requests were never queued")
        assert server.metric("bertonnx_batch_requests_count") == 0   # nothing ran
        server.proc.send_signal(signal.SIGTERM)
        for raw in [*queued, hold]:
            status, _, text = raw.response()
            err = json.loads(text)
            assert status == 503 and err["type"] == "ShuttingDown", err
            assert "--drain-timeout-s" in err["error"]
            raw.close()
        assert server.proc.wait(GUARD_S) == 1, server.log
        lines = [ln for ln in server.log.splitlines() if ln.startswith("bertonnx: error")]
        assert lines == ["bertonnx: error: the drain took longer than --drain-timeout-s 1: "
                         "4 request(s) were answered 503 — raise --drain-timeout-s, or stop "
                         "sending traffic before SIGTERM"], server.log
        assert "Traceback" not in server.log
    finally:
        server.kill()
