"""Issue 17's server items against a live `bertonnx serve` on 127.0.0.1 (tests/live_server.py).

Nothing here asserts a duration or races a sleep. Where a test needs requests to be *queued*
at a moment, it makes that true by construction and waits for /metrics to show it:

- the hold: a request whose body stops half-way is "arriving" (app.py) for --max-wait-ms
  after its last bytes, so with --max-wait-ms 60000 the batch being formed waits for company
  (bertonnx_queue_depth counts it) until that upload completes — the test completes it;
- the gate (the fairness and culprit tests only): the same server started through a
  `python -c` wrapper whose model call blocks on a file for inputs starting with GATE and
  logs every call's parts, so "B's first part is running while S is queued" is a fact the
  test reads, and the order of model calls is a structure it asserts.

Servers are shared per flag set (a module fixture each) and killed at the end; the drain
server is the test's own. Every loop is bounded (live_server.GUARD_S).
"""
from __future__ import annotations

import json
import re
import signal
import threading
from pathlib import Path

import httpx
import pytest

from bertonnx.runtime.core.pipelines.base import BACKEND_CACHE
from bertonnx.runtime.server.settings import Limits, ServeOptions, Timeouts, flag

from tests.conftest import EMB, FM, NER, QA, make_checkpoint
from tests.runtime._compare import assert_same

from tests.live_server import GUARD_S, LiveServer, Raw, serve_argv

# -- servers ---------------------------------------------------------------------------------

# fill-mask with small limits; --max-wait-ms 60000 makes the hold possible; header and
# keep-alive timeouts long, so idle sockets stay counted for the connection cap.
LIMITS = dict(max_batch_size=4, max_inputs=16, max_tokens=200, max_answers=50,
              max_body_bytes=4096, max_connections=12)
LIMITS_FLAGS = ["--max-batch-size", 4, "--max-wait-ms", 60000, "--max-inputs", 16,
                "--max-tokens", 200, "--max-answers", 50, "--max-body-bytes", 4096,
                "--max-connections", 12, "--header-timeout-s", 60, "--keep-alive-s", 60]
# fill-mask with short client timeouts
TIMEOUTS = dict(header_s=0.5, body_s=1.0, keep_alive_s=0.5)
TIMEOUT_FLAGS = ["--header-timeout-s", 0.5, "--body-timeout-s", 1, "--keep-alive-s", 0.5]
# question-answering with a 30,522-token vocabulary: each tokenizer copy is ~6 MB, as MiniLM's
QA_FLAGS = ["--max-context-chars", 2000, "--max-answers", 20]
NEW_VARIANTS = 32       # after a warm-up past BACKEND_CACHE; unbounded they took ~190 MB more
MEMORY_BUDGET_MB = 32   # RSS growth allowed over them (~5 tokenizer copies)


def _serving(argv):
    server = LiveServer(argv)
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def limits_server(tiny_export):
    yield from _serving(serve_argv(tiny_export(FM), *LIMITS_FLAGS))


@pytest.fixture(scope="module")
def timeouts_server(tiny_export):
    yield from _serving(serve_argv(tiny_export(FM), *TIMEOUT_FLAGS))


@pytest.fixture(scope="module")
def qa_export(tmp_path_factory):
    from bertonnx.export import ExportOptions, export_model

    root = tmp_path_factory.mktemp("qa-wide-vocab")
    ckpt = make_checkpoint(root / "ckpt", QA, vocab=30_522)
    export_model(ckpt, QA, root / "export", ExportOptions(parity=False))
    return root / "export"


@pytest.fixture(scope="module")
def qa_server(qa_export):
    yield from _serving(serve_argv(qa_export, *QA_FLAGS))


@pytest.fixture(scope="module")
def ner_server(tiny_export):
    yield from _serving(serve_argv(tiny_export(NER)))


@pytest.fixture(scope="module")
def emb_server(tiny_export):
    yield from _serving(serve_argv(tiny_export(EMB)))


def _in_thread(fn, *args) -> tuple[threading.Thread, dict]:
    """Run fn(*args) on a thread; its result lands in the returned dict's "r"."""
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", fn(*args)), daemon=True)
    t.start()
    return t, out


def _error(response: httpx.Response | tuple) -> tuple[int, dict]:
    if isinstance(response, tuple):
        return response[0], json.loads(response[2])
    return response.status_code, response.json()


def _held(server: LiveServer) -> tuple[Raw, bytes]:
    """The hold: an upload stopped after 5 bytes, seen by the server. Completing it
    (`raw.send(body[5:])`) releases the batch being formed."""
    before = server.metric("bertonnx_in_flight_requests")
    raw = Raw(server)
    body = raw.post({"inputs": "the dog [MASK] ."}, upto=5)
    server.until(lambda: server.metric("bertonnx_in_flight_requests") == before + 1,
                 "the held upload never reached the server")
    return raw, body


def _calls(server: LiveServer) -> tuple[int, int, int]:
    """(model calls, requests in them, inputs in them) so far."""
    m = server.metrics()
    return (int(m["bertonnx_batch_requests_count"]), int(m["bertonnx_batch_requests_sum"]),
            int(m["bertonnx_batch_size_sum"]))


def _no_5xx(server: LiveServer) -> None:
    m = server.metrics()
    assert not [k for k in m if k.startswith('bertonnx_requests_total{status="5')], m
    assert "Traceback" not in server.log, server.log


# -- limits: 413/400 naming the limit and its flag ------------------------------------------

LONG = "the cat sat on the [MASK] . " + "the dog ran to the river . " * 4   # ~37 tokens


@pytest.mark.parametrize("inputs, parameters, status, limit", [
    (["the [MASK] ."] * 17, {}, 413, "max_inputs"),
    ([LONG] * 8, {}, 413, "max_tokens"),
    ("the [MASK] sat on the [MASK] .", {"top_k": 30}, 400, "max_answers"),   # 30 × 2 masks
    ("x [MASK] " * 500, {}, 413, "max_body_bytes"),
], ids=["inputs", "tokens", "top_k-x-masks", "body"])
def test_a_request_past_a_limit_is_refused_naming_it(limits_server, inputs, parameters,
                                                     status, limit):
    status_got, err = _error(limits_server.predict(inputs, **parameters))
    assert status_got == status, err
    assert flag(limit) in err["error"] and str(LIMITS[limit]) in err["error"], err
    # what fits the same limits is served
    assert limits_server.predict("the [MASK] .", top_k=25).status_code == 200


@pytest.mark.parametrize("inputs, parameters, status, limit", [
    ({"question": "who sat ?", "context": "the cat sat . " * 200}, {}, 413,
     "max_context_chars"),
    ([{"question": "who ?", "context": "the cat sat ."}] * 3, {"top_k": 10}, 400,
     "max_answers"),                                                 # 10 × 3 questions
], ids=["context-chars", "top_k-x-questions"])
def test_qa_limits_name_the_flag(qa_server, inputs, parameters, status, limit):
    status_got, err = _error(qa_server.predict(inputs, **parameters))
    assert status_got == status and flag(limit) in err["error"], err


def test_token_classification_text_length_is_capped_before_tokenizing(ner_server):
    """Token classification windows whole texts, as QA its contexts: the same cap (default)."""
    chars = Limits().max_context_chars
    status, err = _error(ner_server.predict(["paris is a city . " * (chars // 36 + 1)] * 2))
    assert status == 413 and f"{flag('max_context_chars')} {chars}" in err["error"], err


# -- every parameter checked by type and range, 400 naming it -------------------------------

BAD_PARAMETERS = [
    (FM, "top_k", "5"), (FM, "top_k", 1e30), (FM, "top_k", True), (FM, "targets", 3),
    (QA, "max_seq_len", "x"), (QA, "max_answer_len", 1e30), (QA, "doc_stride", -1),
    (QA, "handle_impossible_answer", 1), (QA, "align_to_words", "false"),
    (QA, "max_seq_len", 10_000),
    (NER, "ignore_labels", -1), (NER, "ignore_labels", "PER"), (NER, "stride", "2"),
    (NER, "aggregation_strategy", "nope"),
    (EMB, "normalize", "false"), (EMB, "normalize", 1), (EMB, "pooling", 3),
]
GOOD_INPUT = {FM: "the [MASK] sat .", QA: {"question": "who sat ?", "context": "the cat sat ."},
              NER: "paris is a city", EMB: "the cat sat"}
SERVER_OF = {FM: "limits_server", QA: "qa_server", NER: "ner_server", EMB: "emb_server"}


@pytest.mark.parametrize("task, name, value", BAD_PARAMETERS,
                         ids=[f"{t}-{n}={v!r}" for t, n, v in BAD_PARAMETERS])
def test_a_bad_parameter_is_a_400_naming_it(request, task, name, value):
    server = request.getfixturevalue(SERVER_OF[task])
    status, err = _error(server.predict(GOOD_INPUT[task], **{name: value}))
    assert status == 400 and err["error"].startswith(f"{name} must be"), err
    _no_5xx(server)


# -- bounded state ---------------------------------------------------------------------------


def _variants(n: int) -> list[dict]:
    """n distinct (max_seq_len, doc_stride) settings, each a tokenizer setting of its own."""
    pairs = [(seq, stride) for seq in range(24, 65) for stride in range(0, 16)]
    assert len(pairs) >= n
    return [{"max_seq_len": s, "doc_stride": d} for s, d in pairs[:n]]


def test_memory_stays_bounded_over_parameter_variants(qa_server):
    """Each (max_seq_len, doc_stride) needs a tokenizer copy (~6 MB with a 30k vocabulary);
    they live in an LRU of BACKEND_CACHE, so after a warm-up that fills it, NEW_VARIANTS
    more leave the server's RSS within MEMORY_BUDGET_MB (unbounded: ~6 MB each)."""
    qa = {"question": "who sat ?", "context": "the cat sat on the mat . " * 12}
    warm = BACKEND_CACHE + 4
    variants = _variants(warm + NEW_VARIANTS)
    for params in variants[:warm]:
        assert qa_server.predict(qa, **params).status_code == 200
    before = qa_server.rss_mb()
    peak = before
    for params in variants[warm:]:
        r = qa_server.predict(qa, **params)
        assert r.status_code == 200, r.text
        peak = max(peak, qa_server.rss_mb())
    print(f"\nQA server RSS over {NEW_VARIANTS} parameter variants: {before:.0f} MB -> "
          f"{qa_server.rss_mb():.0f} MB (peak {peak:.0f} MB)")
    assert peak - before <= MEMORY_BUDGET_MB


def test_tokenizer_copies_stay_within_the_cache(ours):
    """The library side of the same bound: token classification's `stride` and QA's
    settings each need a copy; any sequence of them keeps at most BACKEND_CACHE."""
    ner, qa = ours(NER), ours(QA)
    for stride in range(3 * BACKEND_CACHE):
        ner("paris is a city with a river . " * 8, stride=stride)
        assert len(ner._backends) <= BACKEND_CACHE
    for params in _variants(3 * BACKEND_CACHE):
        qa(question="who sat ?", context="the cat sat on the mat . " * 12, **params)
        assert len(qa._backends) <= BACKEND_CACHE


# -- a bad input fails alone; work for a client that left is dropped -------------------------


def test_a_bad_input_is_refused_before_its_batch_and_its_neighbours_run_once(limits_server,
                                                                            ours):
    """Three good requests held in one forming batch, a bad one beside them: the bad one is
    answered 400 at once (judged before queueing), and the three plus the hold run as ONE
    model call, each answered as the library answers it."""
    server, pipe = limits_server, ours(FM)
    texts = ["the cat [MASK] .", "a [MASK] dog", "paris is a [MASK] ."]
    hold, body = _held(server)
    with hold:
        calls_before = _calls(server)
        goods = [_in_thread(server.predict, t) for t in texts]
        server.until(lambda: server.metric("bertonnx_queue_depth") == 3,
                     "the good requests were never queued")
        for bad in ("no mask here", "word " * 80 + "[MASK]"):   # mask truncated away
            status, err = _error(server.predict(bad))
            assert status == 400 and "mask" in err["error"], err
        assert server.metric("bertonnx_queue_depth") == 3           # the bad never queued
        hold.send(body[5:])                                          # release the batch
        status, _, answer = hold.response()
        assert status == 200, answer
        for (thread, out), text in zip(goods, texts):
            thread.join(GUARD_S)
            assert out["r"].status_code == 200, out["r"].text
            assert_same(out["r"].json(), json.loads(json.dumps(pipe(text))), atol=1e-5)
    calls, requests, inputs = (a - b for a, b in zip(_calls(server), calls_before))
    assert (calls, requests, inputs) == (1, 4, 4), "the neighbours did not run as one call"


def test_work_for_a_client_that_left_is_dropped_and_not_a_5xx(limits_server):
    server = limits_server
    hold, body = _held(server)
    with hold:
        calls_before = _calls(server)
        gone_before = server.metric('bertonnx_client_disconnects_total{stage="waiting"}')
        stay = _in_thread(server.predict, "the cat [MASK] .")
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
    assert tuple(a - b for a, b in zip(_calls(server), calls_before)) == (1, 2, 2)
    _no_5xx(server)


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
    _no_5xx(server)


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
    from .conftest import one_error_line

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
    _no_5xx(server)


def test_an_idle_keep_alive_connection_is_closed(timeouts_server):
    with Raw(timeouts_server) as raw:
        assert raw.get("/health")[0] == 200
        assert raw.closed_by_server()   # after --keep-alive-s, with nothing sent


def test_a_stalled_upload_never_holds_a_batch(emb_server):
    """An upload stopped half-way (default --max-wait-ms, --body-timeout-s 30): another
    request is answered, in a call of its own, while that upload is still open and before
    it could time out."""
    server = emb_server
    hold, body = _held(server)
    with hold:
        calls_before = _calls(server)
        r = server.predict("the cat sat")
        assert r.status_code == 200
        assert tuple(a - b for a, b in zip(_calls(server), calls_before)) == (1, 1, 1)
        assert server.metric('bertonnx_timeouts_total{stage="body"}') == 0   # still open
        assert server.metric("bertonnx_in_flight_requests") == 1            # (the upload)
        hold.send(body[5:])
        assert hold.response()[0] == 200


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
    b = _in_thread(server.predict, big)
    server.until(lambda: len(server.calls()) == 1, "the maximal request never ran")
    s = _in_thread(server.predict, "small [MASK] .")
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
    gate = _in_thread(server.predict, "GATE [MASK] .")
    server.until(lambda: len(server.calls()) == 1, "the gate request never ran")
    texts = ["a the [MASK] .", "POISON [MASK] .", "c the [MASK] .", "d the [MASK] ."]
    sent = [_in_thread(server.predict, t) for t in texts]
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
    _no_5xx(server)


# -- SIGTERM drain ---------------------------------------------------------------------------


def test_a_drain_past_its_timeout_answers_503_and_exits_1(tiny_export):
    """Three requests provably queued (queue depth 3, held by an upload in progress and
    --max-wait-ms 60000, so their batch cannot start for a minute) when SIGTERM arrives with
    --drain-timeout-s 1: at the drain timeout each of them, and the upload, gets 503
    naming the flag, and the server exits 1 with one line saying so."""
    server = LiveServer(serve_argv(tiny_export(FM), "--max-wait-ms", 60000,
                                   "--drain-timeout-s", 1))
    try:
        hold, _ = _held(server)
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


# -- docs/server-limits.md's table of limits is the settings' --------------------------------


def _readme_limits() -> dict[str, str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "server-limits.md").read_text(
        encoding="utf-8")
    section = text.split("## Flags and defaults", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+?) \|", section, re.M)
    return {name: default.strip() for name, default in rows}


def test_the_readme_lists_every_limit_with_its_default():
    from bertonnx.runtime.server.batching import BatchConfig
    from bertonnx.runtime.server.commands import serve

    # every field of Limits and Timeouts, and the connection and batching bounds
    settings = {**{flag(k): v for k, v in vars(Limits()).items()},
                **{flag(k): v for k, v in vars(Timeouts()).items()},
                "--max-connections": ServeOptions.max_connections,
                "--max-batch-size": BatchConfig.max_batch_size,
                "--max-wait-ms": BatchConfig.max_wait_ms}
    # the click defaults are the settings' (one source of truth for both)
    options = {f"--{o.name.replace('_', '-')}": o for o in serve.params}
    assert set(settings) <= set(options), set(settings) - set(options)
    defaults = {name: options[name].default for name in settings}
    assert defaults == settings
    assert _readme_limits() == {k: f"{v:g}" if isinstance(v, float) else str(v)
                                for k, v in settings.items()}
