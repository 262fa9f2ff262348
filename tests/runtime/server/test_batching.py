"""The dynamic batcher on its own (no model, no HTTP): grouping, limits, errors, draining."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bertonnx.runtime.server.batching import BatchConfig, DynamicBatcher, PayloadError
from bertonnx.runtime.core.errors import InputError


class Recorder:
    """A `run` that records every call and answers each payload with (payload, params)."""

    def __init__(self, delay: float = 0.0, bad: object = None, named: bool = True):
        self.calls: list[tuple[list, dict]] = []
        self.delay = delay
        self.bad = bad
        self.named = named      # say which payload is bad (as the pipeline's runner does)
        self.threads: set[str] = set()
        self.spans: list[tuple[float, float]] = []

    def __call__(self, payloads: list, params: dict) -> list:
        self.calls.append((list(payloads), dict(params)))
        self.threads.add(threading.current_thread().name)
        start = time.monotonic()
        if self.delay:
            time.sleep(self.delay)
        self.spans.append((start, time.monotonic()))
        if self.bad is not None and self.bad in payloads:
            error = InputError(f"bad payload {self.bad!r}")
            if self.named:
                raise PayloadError(payloads.index(self.bad), error)
            raise error
        return [(p, params.get("k")) for p in payloads]


def run(coro):
    return asyncio.run(coro)


async def _one_running(rec) -> tuple[DynamicBatcher, asyncio.Future]:
    """A started batcher (no waiting for company) whose worker is running the call for
    "first": what is submitted next queues behind it."""
    b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=0))
    b.start()
    first = asyncio.ensure_future(b.submit("first", 1, {}))
    await asyncio.sleep(0.05)  # the worker takes "first" at the loop's next turn
    return b, first


async def _submit_all(batcher, jobs):
    return await asyncio.gather(*(batcher.submit(p, size, params) for p, size, params in jobs),
                                return_exceptions=True)


def test_concurrent_requests_share_one_call_and_keep_their_answers():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=200))
        b.start()
        out = await _submit_all(b, [(i, 1, {}) for i in range(10)])
        await b.close()
        return out

    assert run(main()) == [(i, None) for i in range(10)]
    assert len(rec.calls) == 1 and rec.calls[0][0] == list(range(10))
    assert all(name.startswith("bertonnx-batch") for name in rec.threads)


def test_groups_by_identical_parameters():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=200))
        b.start()
        jobs = [(i, 1, {"k": i % 2, "z": [1, 2]}) for i in range(6)]
        jobs.append((99, 1, {"z": [1, 2], "k": 1}))   # same parameters, other key order
        out = await _submit_all(b, jobs)
        await b.close()
        return out

    out = run(main())
    assert out == [(i, i % 2) for i in range(6)] + [(99, 1)]
    assert sorted((sorted(p), params["k"]) for p, params in rec.calls) == \
        [([0, 2, 4], 0), ([1, 3, 5, 99], 1)]


def test_max_batch_size_counts_inputs_and_keeps_order():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=4, max_wait_ms=100))
        b.start()
        # sizes 3, 3, 1, 6 (the last is larger than the limit: it runs alone)
        out = await _submit_all(b, [("a", 3, {}), ("b", 3, {}), ("c", 1, {}), ("d", 6, {})])
        await b.close()
        return out

    assert [r[0] for r in run(main())] == ["a", "b", "c", "d"]
    assert [c[0] for c in rec.calls] == [["a"], ["b", "c"], ["d"]]


def test_max_wait_bounds_the_wait_for_company():
    rec = Recorder()

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=20))
        b.start()
        t0 = time.monotonic()
        first = await b.submit("alone", 1, {})
        waited = time.monotonic() - t0
        await b.close()
        return first, waited

    first, waited = run(main())
    assert first == ("alone", None)
    # It waited for company (at least max_wait) but did not hang on to the request for long.
    assert 0.015 <= waited < 2.0


def test_busy_worker_lets_the_queue_grow_into_the_next_batch():
    rec = Recorder(delay=0.2)

    async def main():
        b, first = await _one_running(rec)  # these queue behind "first"
        rest = await _submit_all(b, [(i, 1, {}) for i in range(5)])
        await first
        await b.close()
        return rest

    assert run(main()) == [(i, None) for i in range(5)]
    assert [c[0] for c in rec.calls] == [["first"], [0, 1, 2, 3, 4]]


def test_one_bad_request_does_not_fail_its_batch_mates():
    rec = Recorder(bad="bad")

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=200))
        b.start()
        out = await _submit_all(b, [("x", 1, {}), ("bad", 1, {}), ("y", 1, {})])
        await b.close()
        return out

    x, bad, y = run(main())
    assert x == ("x", None) and y == ("y", None)
    assert isinstance(bad, InputError) and "bad payload" in str(bad)
    # the merged call named its culprit: the others ran again together, not one by one
    assert [c[0] for c in rec.calls] == [["x", "bad", "y"], ["x", "y"]]


def test_an_unnamed_bad_input_is_found_by_halving_the_group():
    rec = Recorder(bad=5, named=False)

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=200))
        b.start()
        out = await _submit_all(b, [(i, 1, {}) for i in range(8)])
        await b.close()
        return out

    out = run(main())
    assert [o for i, o in enumerate(out) if i != 5] == [(i, None) for i in range(8) if i != 5]
    assert isinstance(out[5], InputError)
    # 1 + 2·log2(8) calls at most, where running each alone after the failure would be 1 + 8
    assert [c[0] for c in rec.calls] == [list(range(8)), [0, 1, 2, 3], [4, 5, 6, 7], [4, 5],
                                         [4], [5], [6, 7]]


def test_a_request_whose_client_left_is_dropped_from_the_queue():
    rec = Recorder(delay=0.2)

    async def main():
        b, first = await _one_running(rec)  # the next two queue behind "first"
        gone = asyncio.ensure_future(b.submit("gone", 1, {}))
        stays = asyncio.ensure_future(b.submit("stays", 1, {}))
        await asyncio.sleep(0.01)
        gone.cancel()                       # what the app does when the client hangs up
        out = (await first, await stays)
        await b.close()
        return out

    assert run(main()) == (("first", None), ("stays", None))
    assert [c[0] for c in rec.calls] == [["first"], ["stays"]]


def test_parts_of_a_large_request_take_turns_with_small_ones():
    """The fairness rule: a request's parts are queued one after another, each behind what
    arrived meanwhile, so a small request waits for one part, not for the whole request."""
    rec = Recorder(delay=0.05)

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=4, max_wait_ms=0))
        b.start()
        big = asyncio.ensure_future(b.submit_parts([(f"big{i}", 4) for i in range(5)], {}))
        await asyncio.sleep(0.02)           # big0 runs
        small = await b.submit("small", 1, {})
        small_done_after = len(rec.calls)
        out = (await big, small)
        await b.close()
        return out, small_done_after

    (big, small), after = run(main())
    assert big == [(f"big{i}", None) for i in range(5)] and small == ("small", None)
    # small ran right after the part in progress when it came (big0), with big1 or alone
    assert after <= 2, rec.calls


def test_unexpected_errors_reach_every_request_of_the_call():
    def boom(payloads, params):
        raise RuntimeError("kaput")

    async def main():
        b = DynamicBatcher(boom, BatchConfig(max_batch_size=8, max_wait_ms=100))
        b.start()
        out = await _submit_all(b, [(1, 1, {}), (2, 1, {})])
        await b.close()
        return out

    assert [type(e) for e in run(main())] == [RuntimeError, RuntimeError]


def test_wrong_result_count_is_an_error_not_a_misdelivery():
    async def main():
        b = DynamicBatcher(lambda p, k: p[:1], BatchConfig(max_batch_size=8, max_wait_ms=100))
        b.start()
        out = await _submit_all(b, [(1, 1, {}), (2, 1, {})])
        await b.close()
        return out

    assert all(isinstance(e, RuntimeError) for e in run(main()))


def test_close_finishes_queued_work_and_then_refuses():
    rec = Recorder(delay=0.05)

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=2, max_wait_ms=0))
        b.start()
        pending = [asyncio.ensure_future(b.submit(i, 1, {})) for i in range(7)]
        await asyncio.sleep(0)              # let them enqueue
        await b.close()
        assert all(f.done() for f in pending)
        with pytest.raises(RuntimeError, match="not running"):
            await b.submit("late", 1, {})
        return [f.result() for f in pending]

    assert run(main()) == [(i, None) for i in range(7)]
    assert sum(len(c[0]) for c in rec.calls) == 7


def test_workers_run_batches_in_parallel():
    rec = Recorder(delay=0.3)

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=1, max_wait_ms=0, workers=2))
        b.start()
        await _submit_all(b, [(i, 1, {}) for i in range(2)])
        await b.close()

    run(main())
    assert len(rec.threads) == 2
    (s1, e1), (s2, e2) = rec.spans
    assert max(s1, s2) < min(e1, e2), "the two calls did not overlap"


def test_on_batch_hook_sees_inputs_and_requests():
    seen = []

    async def main():
        b = DynamicBatcher(Recorder(), BatchConfig(max_batch_size=64, max_wait_ms=200),
                           on_batch=lambda n, r, s: seen.append((n, r, s >= 0)))
        b.start()
        await _submit_all(b, [("a", 3, {}), ("b", 2, {})])
        await b.close()

    run(main())
    assert seen == [(5, 2, True)]


@pytest.mark.parametrize("kwargs", [dict(max_batch_size=0), dict(max_wait_ms=-1), dict(workers=0)])
def test_bad_config(kwargs):
    with pytest.raises(InputError):
        BatchConfig(**kwargs)


def test_no_wait_when_nothing_else_is_arriving():
    """A lone request goes at once when the server reports no other request on its way in;
    while one is reported, the batch waits for it (up to max_wait)."""
    rec = Recorder()
    arriving = [0]

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=64, max_wait_ms=5000),
                           arriving=lambda: arriving[0])
        b.start()
        alone = await asyncio.wait_for(b.submit("alone", 1, {}), 2.5)   # << max_wait
        arriving[0] = 1                       # a second request is being read...
        first = asyncio.ensure_future(b.submit("first", 1, {}))
        await asyncio.sleep(0.2)
        arriving[0] = 0                       # ...and now submitted: it joins the same batch
        second = await b.submit("second", 1, {})
        out = (alone, await first, second)
        await b.close()
        return out

    assert run(main()) == (("alone", None), ("first", None), ("second", None))
    assert [c[0] for c in rec.calls] == [["alone"], ["first", "second"]]


def test_queued_counts_the_batch_being_formed():
    """`queued` (the server's queue-depth gauge) counts every job not yet running: those in
    the queue and those in the batch being formed, here waiting for a request on its way in."""
    rec = Recorder()
    arriving = [1]

    async def main():
        b = DynamicBatcher(rec, BatchConfig(max_batch_size=8, max_wait_ms=60_000),
                           arriving=lambda: arriving[0])
        b.start()
        jobs = [asyncio.ensure_future(b.submit(i, 1, {})) for i in range(3)]
        for _ in range(100):          # let the loop take them into the batch it forms
            await asyncio.sleep(0)
        forming = (b.queued, rec.calls[:])
        arriving[0] = 0               # the one on its way arrives; nobody else: it goes
        await b.submit(3, 1, {})
        await asyncio.gather(*jobs)
        out = (*forming, b.queued)
        await b.close()
        return out

    assert run(main()) == (3, [], 0)
    assert [c[0] for c in rec.calls] == [[0, 1, 2, 3]]
