"""One request's trouble stays its own, against a live `bertonnx serve` (issue 17; helpers in
_live.py): a bad input is refused before its batch and its neighbours run once, work for a
client that left is dropped, a hang-up is counted apart, a small request is served between a
maximal one's parts, and an input the model call refuses fails alone.

The last two go through the gate: the same server started through a `python -c` wrapper whose
model call blocks on a file for inputs starting with GATE and logs every call's parts, so "B's
first part is running while S is queued" is a fact the test reads, and the order of model calls
is a structure it asserts.
"""
from __future__ import annotations

import json

import pytest

from tests.conftest import FM
from tests.live_server import GUARD_S, LiveServer, Raw, serve_argv
from tests.runtime._compare import assert_same

from ._live import held, in_thread, model_calls, no_5xx, status_error

# -- a bad input fails alone; work for a client that left is dropped -------------------------


def test_a_bad_input_is_refused_before_its_batch_and_its_neighbours_run_once(limits_server,
                                                                            ours):
    """Three good requests held in one forming batch, a bad one beside them: the bad one is
    answered 400 at once (judged before queueing), and the three plus the hold run as ONE
    model call, each answered as the library answers it."""
    server, pipe = limits_server, ours(FM)
    texts = ["the cat [MASK] .", "a [MASK] dog", "paris is a [MASK] ."]
    hold, body = held(server)
    with hold:
        calls_before = model_calls(server)
        goods = [in_thread(server.predict, t) for t in texts]
        server.until(lambda: server.metric("bertonnx_queue_depth") == 3,
                     "the good requests were never queued")
        for bad in ("no mask here", "word " * 80 + "[MASK]"):   # mask truncated away
            status, err = status_error(server.predict(bad))
            assert status == 400 and "mask" in err["error"], err
        assert server.metric("bertonnx_queue_depth") == 3           # the bad never queued
        hold.send(body[5:])                                          # release the batch
        status, _, answer = hold.response()
        assert status == 200, answer
        for (thread, out), text in zip(goods, texts):
            thread.join(GUARD_S)
            assert out["r"].status_code == 200, out["r"].text
            assert_same(out["r"].json(), json.loads(json.dumps(pipe(text))), atol=1e-5)
    calls, requests, inputs = (a - b for a, b in zip(model_calls(server), calls_before))
    assert (calls, requests, inputs) == (1, 4, 4), "the neighbours did not run as one call"


def test_work_for_a_client_that_left_is_dropped_and_not_a_5xx(limits_server):
    server = limits_server
    hold, body = held(server)
    with hold:
        calls_before = model_calls(server)
        gone_before = server.metric('bertonnx_client_disconnects_total{stage="waiting"}')
        stay = in_thread(server.predict, "the cat [MASK] .")
        gone = Raw(server)
        gone.post({"inputs": ["a [MASK] dog", "the [MASK] ran"]})
        server.until(lambda: server.metric("bertonnx_queue_depth") == 2,
                     "the requests were never queued")
        gone.close()
        server.until(lambda: server.metric('bertonnx_client_disconnects_total{stage="waiting"}')
                     == gone_before + 1, "the hang-up was never counted")
        hold.send(body[5:])
        assert hold.response()[0] == 200
        stay[0].join(GUARD_S)
        assert stay[1]["r"].status_code == 200
    # one call, for the request that stayed and the hold: the 2 inputs of the one that
    # left were dropped, not computed
    assert tuple(a - b for a, b in zip(model_calls(server), calls_before)) == (1, 2, 2)
    no_5xx(server)


def test_a_client_hanging_up_mid_body_is_counted_apart_not_a_5xx(limits_server):
    server = limits_server
    key = 'bertonnx_client_disconnects_total{stage="body"}'
    before, answered = server.metric(key), server.metrics()
    with Raw(server) as raw:
        raw.post({"inputs": "the cat [MASK] ."}, upto=8)
        server.until(lambda: server.metric("bertonnx_in_flight_requests") == 1,
                     "the upload never reached the server")
    server.until(lambda: server.metric(key) == before + 1, "the hang-up was never counted")
    after = server.metrics()
    statuses = {k: v for k, v in after.items() if k.startswith("bertonnx_requests_total")}
    assert statuses == {k: v for k, v in answered.items()
                        if k.startswith("bertonnx_requests_total")}, "it was counted as answered"
    no_5xx(server)



# -- fairness and the culprit, through the gate ----------------------------------------------

_GATED_SERVE = r"""
import json, pathlib, sys, time
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.server import protocol
from bertonnx.runtime.cli import main

calls, gate = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
run, init = protocol.PipelineRunner.__call__, protocol.PipelineRunner.__init__

def gated(self, parts, params):   # log the call's parts, then block on GATE
    with calls.open("a") as f:
        f.write(json.dumps([[p.records[0], len(p)] for p in parts]) + "\n")
    if any(r.startswith("GATE") for p in parts for r in p.records):
        while not gate.exists():
            time.sleep(0.01)
    return run(self, parts, params)

class Poisoned:   # an input the model call itself refuses (as a lost mask would be)
    def __init__(self, pipe):
        self.pipe = pipe
    def __getattr__(self, name):
        return getattr(self.pipe, name)
    def __call__(self, inputs, **params):
        for i, r in enumerate(inputs.records):
            if r.startswith("POISON"):
                raise InputError(f"input #{i} is poisoned", "leave it out", index=i)
        return self.pipe(inputs, **params)

protocol.PipelineRunner.__call__ = gated
protocol.PipelineRunner.__init__ = lambda self, pipe: init(self, Poisoned(pipe))
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture
def gated_server(tiny_export, tmp_path):
    calls, gate = tmp_path / "calls.jsonl", tmp_path / "gate"
    argv = serve_argv(tiny_export(FM), "--max-batch-size", 4, "--max-inputs", 16)
    argv[1:3] = ["-c", _GATED_SERVE, str(calls), str(gate)]
    server = LiveServer(argv)
    server.calls = lambda: ([json.loads(ln) for ln in calls.read_text().splitlines()]
                            if calls.exists() else [])
    server.open_gate = gate.touch
    try:
        yield server
    finally:
        gate.touch()
        server.kill()


def _who(call: list) -> str:
    return "".join(first.split()[0][0] for first, _ in call)   # G(ATE), b(ig), s(mall), ...


def test_a_small_request_beside_a_maximal_one_is_served_between_its_parts(gated_server, ours):
    """The fairness rule: a request's inputs go in parts of --max-batch-size, one part at a
    time, each behind what is queued. A maximal request (16 inputs = 4 parts) has its first
    part running when a small one arrives: the small one runs next, alone, before the
    maximal request's second part."""
    server, pipe = gated_server, ours(FM)
    big = ["GATE the [MASK] ."] + [f"big {i} the [MASK] ." for i in range(1, 16)]
    b = in_thread(server.predict, big)
    server.until(lambda: len(server.calls()) == 1, "the maximal request never ran")
    s = in_thread(server.predict, "small [MASK] .")
    server.until(lambda: server.metric("bertonnx_queue_depth") == 1, "the small one never queued")
    server.open_gate()
    for thread, _ in (b, s):
        thread.join(GUARD_S)
    assert b[1]["r"].status_code == 200 and s[1]["r"].status_code == 200
    assert [_who(c) for c in server.calls()] == ["G", "s", "b", "b", "b"]
    assert [len(c) == 1 and c[0][1] for c in server.calls()] == [4, 1, 4, 4, 4]
    assert_same(s[1]["r"].json(), json.loads(json.dumps(pipe("small [MASK] ."))), atol=1e-5)
    assert_same(b[1]["r"].json(), json.loads(json.dumps(pipe(big))), atol=1e-5)


def test_an_input_the_model_call_refuses_fails_alone(gated_server):
    """Four requests merged in one call, one of them refused by the call itself: it gets its
    400, and the other three run again ONCE, together — not one by one."""
    server = gated_server
    gate = in_thread(server.predict, "GATE [MASK] .")
    server.until(lambda: len(server.calls()) == 1, "the gate request never ran")
    texts = ["a the [MASK] .", "POISON [MASK] .", "c the [MASK] .", "d the [MASK] ."]
    sent = [in_thread(server.predict, t) for t in texts]
    server.until(lambda: server.metric("bertonnx_queue_depth") == 4, "the four never queued")
    server.open_gate()
    for thread, _ in [gate, *sent]:
        thread.join(GUARD_S)
    answers = [out["r"] for _, out in sent]
    assert [r.status_code for r in answers] == [200, 400, 200, 200]
    assert "poisoned" in answers[1].json()["error"]
    calls = server.calls()
    assert [sorted(_who([p]) for p in c) for c in calls] == [
        ["G"], ["P", "a", "c", "d"], ["a", "c", "d"]]
    no_5xx(server)
