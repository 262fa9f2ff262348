"""Backpressure and deadlines (`serve --max-queued-inputs`, `--request-timeout-s`;
runtime/server/admission.py).

The overload test runs the real `bertonnx serve` with its model calls held at a gate
(_gated_serve.py): while the gate is closed, the inputs admitted stay pending, so which
requests are admitted is exact, not a race — and every 429 is seen to arrive while admitted
work waits for the model, before its own inputs were tokenized. Then the gate opens and the
admitted requests answer as the library does. Round after round, over the same keep-alive
connections, with the server's RSS read before and after.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from bertonnx.runtime.cli.main import cli
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.server import ServeOptions, create_app
from bertonnx.runtime.server.batching import BatchConfig
from bertonnx.runtime.server.metrics import Metrics
from bertonnx.runtime.server.settings import Backpressure, Limits

from tests.live_server import GUARD_S, LiveServer
from tests.runtime._threaded_server import threaded_server
from tests.runtime.server._helpers import (BATCHED_ATOL, EchoPipeline, TestClient, assert_close,
                                           jsonable, wait_ready)

CAP, SIZE, CLIENTS, ROUNDS = 8, 2, 16, 8   # 16 requests × 2 inputs = 4 × the cap, each round
ADMITTED = CAP // SIZE


def test_overload_is_429_at_once_and_the_admitted_answer_right(tiny_export, ours, tmp_path,
                                                                monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("BERTONNX_TEST_GATE", str(gate))
    root = str(Path(__file__).resolve().parents[3])   # `tests` importable from any cwd
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        root, os.environ.get("PYTHONPATH")])))
    export = tiny_export("text-classification")
    pipe = ours("text-classification")
    argv = [sys.executable, "-m", "tests.runtime.server._gated_serve", str(export), "--port",
            "0", "--max-queued-inputs", str(CAP), "--max-batch-size", "4"]
    statuses: list[int] = []
    with LiveServer(argv) as server:

        async def one_round(client, n: int) -> float:
            bodies = [[f"the cat {n} sat on mat {i}", f"music {i} and film {n}"]
                      for i in range(CLIENTS)]
            tasks = [asyncio.ensure_future(client.post("/predict", json={"inputs": b}))
                     for b in bodies]
            # the gate is closed: every request past the cap is answered while the admitted
            # ones wait for the model (a wrong admission would leave this loop waiting: the
            # guard fails it)
            refused = set()
            while len(refused) < CLIENTS - ADMITTED:
                done, _ = await asyncio.wait([t for t in tasks if t not in refused],
                                             timeout=GUARD_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                assert done, f"round {n}: only {len(refused)} answered 429"
                for t in done:
                    r = t.result()
                    assert r.status_code == 429, (n, r.status_code, r.text)
                    assert r.headers["retry-after"] == "1"
                    assert "--max-queued-inputs" in r.json()["error"]
                    refused.add(t)
            held = [t for t in tasks if t not in refused]
            assert len(held) == ADMITTED and not any(t.done() for t in held)
            gauge = Metrics.parse((await client.get("/metrics")).text)
            assert gauge["bertonnx_queued_inputs"] == CAP
            priced = len(gate.with_name("gate.priced").read_text().splitlines())
            gate.touch()   # the model answers from here
            answers = await asyncio.gather(*held)
            gate.unlink()
            for t, r in zip(held, answers):
                assert r.status_code == 200, r.text
                assert_close(r.json(), jsonable(pipe(bodies[tasks.index(t)])), BATCHED_ATOL)
            statuses.extend([429] * len(refused) + [200] * len(held))
            return priced

        async def overload():
            limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
            async with httpx.AsyncClient(base_url=server.url, timeout=GUARD_S,
                                         limits=limits) as client:
                priced = [await one_round(client, 0)]
                rss_before = server.rss_mb()
                for n in range(1, ROUNDS):
                    priced.append(await one_round(client, n))
                return priced, rss_before, server.rss_mb()

        priced, rss_before, rss_after = asyncio.run(overload())
        # only the admitted requests were tokenized (priced), never the refused ones
        assert priced == [ADMITTED * (n + 1) for n in range(ROUNDS)]
        # the same connections carried 429s answered before their bodies were read, then
        # the next round's requests: nothing but 200 and 429, as many as the server counted
        metrics = server.metrics()
        assert {k for k in metrics if k.startswith("bertonnx_requests_total")} == {
            'bertonnx_requests_total{status="200"}', 'bertonnx_requests_total{status="429"}'}
        assert metrics['bertonnx_requests_total{status="429"}'] == statuses.count(429) == (
            ROUNDS * (CLIENTS - ADMITTED))
        assert metrics['bertonnx_requests_total{status="200"}'] == statuses.count(200)
        assert metrics["bertonnx_queued_inputs"] == 0
        # held work is released: RSS after 7 more overloaded rounds within 25 MiB of round 1's
        # (the process is ~90 MiB; a request kept alive would be a few kB each, per round)
        print(f"\nserver RSS {rss_before:.1f} -> {rss_after:.1f} MiB over {ROUNDS - 1} rounds")
        assert rss_after - rss_before < 25, (rss_before, rss_after)
        assert server.terminate() == 0, server.log


# -- the deadline, in process ----------------------------------------------------------------


class HeldEcho(EchoPipeline):
    """EchoPipeline whose calls are recorded and held until `gate` is set."""

    def __init__(self):
        self.calls: list = []
        self.entered, self.gate, self.left = threading.Event(), threading.Event(), threading.Event()

    def __call__(self, inputs, **kwargs):
        self.calls.append(list(inputs.records))
        self.entered.set()
        assert self.gate.wait(GUARD_S), "the test never opened the gate"
        try:
            return super().__call__(inputs, **kwargs)
        finally:
            self.left.set()


def test_work_past_the_deadline_is_503_and_never_computed():
    """A runs (held); B queues behind it; both pass --request-timeout-s: 503 + Retry-After.
    Once the model is free, C runs — and B's input was never computed."""
    pipe = HeldEcho()
    options = ServeOptions(name="echo", batch=BatchConfig(max_wait_ms=0),
                           backpressure=Backpressure(request_timeout_s=0.5))
    with threaded_server(pipe, "echo", options) as url:

        async def scenario():
            async with httpx.AsyncClient(base_url=url, timeout=GUARD_S) as client:
                a = asyncio.ensure_future(client.post("/predict", json={"inputs": ["a"]}))
                assert await asyncio.to_thread(pipe.entered.wait, GUARD_S)
                b = await client.post("/predict", json={"inputs": ["b"]})
                a = await a
                pipe.gate.set()
                assert await asyncio.to_thread(pipe.left.wait, GUARD_S)
                c = await client.post("/predict", json={"inputs": ["c"]})
                metrics = Metrics.parse((await client.get("/metrics")).text)
                return a, b, c, metrics

        a, b, c, metrics = asyncio.run(scenario())
    for r in (a, b):
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["type"] == "DeadlineExceeded" and "--request-timeout-s" in r.text
    assert c.status_code == 200 and c.json() == [[{"token_str": "C", "score": 0.5, "top_k": 5}]]
    assert pipe.calls == [["a"], ["c"]]             # B was dropped from the queue
    assert metrics['bertonnx_timeouts_total{stage="request"}'] == 2
    assert metrics["bertonnx_queued_inputs"] == 0


def test_an_idle_server_admits_a_request_larger_than_the_cap():
    options = ServeOptions(backpressure=Backpressure(max_queued_inputs=2))
    with TestClient(create_app("/x/echo", options, loader=EchoPipeline)) as client:
        wait_ready(client)
        r = client.post("/predict", json={"inputs": ["a", "b", "c", "d", "e"]})
        assert r.status_code == 200 and len(r.json()) == 5


def test_the_flags_reach_the_settings(tiny_export, monkeypatch):
    calls = []
    monkeypatch.setattr("bertonnx.runtime.server.process.run_server",
                        lambda model_dir, options, **kw: calls.append(options) or 0)
    export = str(tiny_export("text-classification"))
    runner = CliRunner()
    assert runner.invoke(cli, ["serve", export]).exit_code == 0
    assert runner.invoke(cli, ["serve", export, "--max-queued-inputs", "64",
                               "--request-timeout-s", "5", "--workers", "2"]).exit_code == 0
    default, given = (o.backpressure for o in calls)
    assert default == Backpressure() and default.request_timeout_s == 60
    limits = Limits()
    assert default.cap(BatchConfig(), limits) == 4 * 128 == 2 * limits.max_inputs
    assert default.cap(BatchConfig(workers=2), limits) == 1024
    # a narrow batch still leaves room for two maximal requests
    assert default.cap(BatchConfig(max_batch_size=4), Limits(max_inputs=16)) == 32
    assert given == Backpressure(64, 5.0) and given.cap(calls[1].batch, limits) == 64
    res = runner.invoke(cli, ["serve", export, "--max-queued-inputs", "0"])
    assert res.exit_code == 2 and "--max-queued-inputs" in res.output


@pytest.mark.parametrize("bad", [{"max_queued_inputs": 0}, {"request_timeout_s": 0},
                                 {"request_timeout_s": float("nan")}])
def test_backpressure_settings_are_checked(bad):
    with pytest.raises(InputError):
        Backpressure(**bad)


@pytest.mark.parametrize("workers", [1, 2])
def test_each_worker_has_its_own_stream(tiny_export, workers):
    """--workers model calls at once each run on a share of the threads (an engine stream),
    not all on every thread at once."""
    from bertonnx.runtime.server.registry import Model

    options = ServeOptions(batch=BatchConfig(workers=workers), threads=2)
    pipe = Model("m", tiny_export("feature-extraction"), options, Metrics()).load()
    assert pipe.session.config.streams == workers
