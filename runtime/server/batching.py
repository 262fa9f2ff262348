"""Dynamic batching for the server: many concurrent requests, one pipeline call per batch.

Requests wait in an asyncio queue. When a worker is free the batcher takes the oldest request,
keeps collecting until the batch holds `max_batch_size` inputs or `max_wait_ms` has passed
since that request arrived, groups the batch by identical parameters, and runs ONE call per
group in a worker thread (onnxruntime releases the GIL, so the event loop keeps accepting
requests meanwhile). Results go back to each request's future, in its own input order.

The same idea as Triton's dynamic batcher (max_queue_delay_microseconds, preferred sizes):
a request never waits longer than max_wait_ms for company, and while every worker is busy the
queue fills so the next batch is as large as the traffic allows. One refinement: when the
server says no other request is on its way in (`arriving() == 0`) and none is queued, the
batch goes at once — a lone client does not pay max_wait_ms on every request.

Fairness: `submit_parts` sends a request's inputs in parts of at most `part` inputs
(`part_size`, capped by max_batch_size), one at a time — its next part joins the BACK of the
queue only once the previous one is answered. A request therefore waits for at most one part
of each request queued ahead of it, however many inputs those hold, and a large request holds
at most one worker at a time. A batch is wider than a part (128 inputs to 32 by default): it
takes one part from each of several requests, and the pipeline sorts them all by length
before cutting its micro-batches, so concurrent requests pad less together than apart.

A bad input fails alone: `run` raises `PayloadError(position, error)` naming the payload at
fault, which gets the error while the rest of the group runs again as one call; an InputError
that names no payload splits the group in halves until it is found (log2 calls, not one per
request). Jobs whose future was cancelled (the client went away, or a drain cut them) are
dropped when the batch is collected, and their results discarded if they were already running.

Torch-free and server-agnostic: `run(jobs_inputs, params)` is any callable that maps a list
of request payloads with one parameter set to a list of results, one per payload.
"""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from ..core.bounds import MAX_BATCH_SIZE
from ..core.errors import InputError

# run(payloads, params) -> one result per payload; raises PayloadError (or an InputError)
# for a bad input.
RunFn = Callable[[list, dict], list]
# on_batch(items, requests, seconds): called after every pipeline call, for metrics.
BatchHook = Callable[[int, int, float], None]
# arriving(): requests the server has received but not yet submitted (being read or parsed).
ArrivingHint = Callable[[], int]


MAX_WORKERS = 64   # model calls at once; each is a thread with its own onnxruntime run


@dataclass(frozen=True)
class BatchConfig:
    # inputs (not requests) per pipeline call. The pipeline sorts a call's inputs by length
    # before cutting them into token-capped micro-batches, so a wider call pads less: 128 over
    # 32 served 1.25× the texts/s at 16 clients × 8 sentences, p99 lower
    # (docs/benchmarks-history.md, "Serving against infinity")
    max_batch_size: int = 128
    max_wait_ms: float = 5.0      # how long the oldest request may wait for company
    workers: int = 1              # pipeline calls in flight at once (threads)
    # a request's inputs are queued in parts of at most this many (the fairness unit, above):
    # a small request beside a large one waits for one 32-input part of it, not 128
    part_size: int = 32

    def __post_init__(self):
        if not 1 <= self.max_batch_size <= MAX_BATCH_SIZE:
            raise InputError(f"max batch size must be from 1 to {MAX_BATCH_SIZE}, got "
                             f"{self.max_batch_size}", "pass e.g. --max-batch-size 128")
        if self.max_wait_ms < 0:
            raise InputError(f"max wait must be ≥ 0 ms, got {self.max_wait_ms}",
                             "pass --max-wait-ms 0 or more")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise InputError(f"workers must be from 1 to {MAX_WORKERS}, got {self.workers}",
                             "pass e.g. --workers 2")
        if not 1 <= self.part_size <= MAX_BATCH_SIZE:
            raise InputError(f"part size must be from 1 to {MAX_BATCH_SIZE}, got "
                             f"{self.part_size}", "pass e.g. --part-size 32")

    @property
    def part(self) -> int:
        """Inputs per queued part of a request: --part-size, never wider than a batch."""
        return min(self.part_size, self.max_batch_size)


class PayloadError(Exception):
    """Raised by `run`: payload `position` of the call is at fault, with `error`."""

    def __init__(self, position: int, error: BaseException):
        super().__init__(f"payload {position}: {error}")
        self.position, self.error = position, error


@dataclass
class _Job:
    payload: Any                  # what `run` receives for this request
    size: int                     # number of inputs it carries (counts toward max_batch_size)
    params: dict
    key: str                      # canonical JSON of params: requests batch only with equals
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


_STOP = object()


def params_key(params: dict) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


class DynamicBatcher:
    """`await submit(payload, size, params)` -> that payload's result, computed in a batch."""

    def __init__(self, run: RunFn, config: BatchConfig = BatchConfig(), *,
                 on_batch: BatchHook | None = None, arriving: ArrivingHint | None = None,
                 shared: asyncio.Semaphore | None = None):
        self._run = run
        # a bound on model calls shared with other models' batchers (one server, several
        # models): a batch runs once it holds one of its own workers and one shared slot
        self._shared = shared
        self.config = config
        self._on_batch = on_batch
        self._arriving = arriving
        self._queue: asyncio.Queue | None = None
        self._loop_task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        self._carry: _Job | None = None   # a job that did not fit in the previous batch
        self._forming: list[_Job] = []     # taken from the queue, not yet running
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the collecting loop on the running event loop."""
        self._queue = asyncio.Queue()
        self._slots = asyncio.Semaphore(self.config.workers)
        self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="bertonnx-batch")
        self._loop_task = asyncio.get_running_loop().create_task(self._collect_forever())

    async def close(self) -> None:
        """Refuse new work, finish every queued and running request, stop the threads."""
        if self._loop_task is None or self._closed:
            return
        self._closed = True
        await self._queue.put(_STOP)
        await self._loop_task
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        self._pool.shutdown(wait=True)

    @property
    def queued(self) -> int:
        """Jobs submitted and not yet running: in the queue, carried over, or in the batch
        being formed (waiting for a worker or for company)."""
        return ((self._queue.qsize() if self._queue else 0) + (self._carry is not None)
                + len(self._forming))

    # -- requests ----------------------------------------------------------------------------

    async def submit(self, payload: Any, size: int, params: dict) -> Any:
        if self._loop_task is None or self._closed:
            raise RuntimeError("the batcher is not running")
        future = asyncio.get_running_loop().create_future()
        await self._queue.put(_Job(payload, max(1, size), params, params_key(params), future))
        return await future

    async def submit_parts(self, parts: list[tuple[Any, int]], params: dict) -> list:
        """Each (payload, size) part's result, the parts queued one after another (the
        fairness rule in the module docstring). Cancelling the caller drops the rest."""
        return [await self.submit(payload, size, params) for payload, size in parts]

    # -- the loop ----------------------------------------------------------------------------

    async def _collect_forever(self) -> None:
        while True:
            first = self._carry or await self._queue.get()
            self._carry = None
            if first is _STOP:
                return
            if first.future.done():
                continue   # its client went away while it queued
            self._forming = [first]
            # Wait for a free worker before collecting: while all are busy, requests pile up
            # in the queue and the next batch takes them all at once.
            await self._slots.acquire()
            if self._shared is not None:
                await self._shared.acquire()
            batch, stop = await self._collect(first)
            self._forming = []
            task = asyncio.get_running_loop().create_task(self._dispatch(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            if stop:
                return

    async def _collect(self, first: _Job) -> tuple[list[_Job], bool]:
        batch, size = self._forming, first.size   # the batch is `_forming` until dispatched
        deadline = first.arrived + self.config.max_wait_ms / 1000
        while size < self.config.max_batch_size:
            try:
                job = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    break
                if self._arriving is not None and self._arriving() == 0:
                    break   # nobody else is on the way: waiting would only add latency
                try:
                    job = await asyncio.wait_for(self._queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
            if job is _STOP:
                return batch, True
            if job.future.done():
                continue
            if size + job.size > self.config.max_batch_size:
                self._carry = job   # starts the next batch, keeping arrival order
                break
            batch.append(job)
            size += job.size
        return batch, False

    async def _dispatch(self, batch: list[_Job]) -> None:
        try:
            groups: dict[str, list[_Job]] = {}
            for job in batch:
                groups.setdefault(job.key, []).append(job)
            for jobs in groups.values():
                await self._run_group(jobs)
        finally:
            self._slots.release()
            if self._shared is not None:
                self._shared.release()

    async def _run_group(self, jobs: list[_Job]) -> None:
        jobs = [j for j in jobs if not j.future.done()]   # gone while the batch formed
        if not jobs:
            return
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._pool, self._timed_run, jobs)
        except PayloadError as e:
            # the culprit fails alone; its batch-mates run again, together
            _settle(jobs[e.position], exc=e.error)
            await self._run_group(jobs[:e.position] + jobs[e.position + 1:])
            return
        except InputError as e:
            if len(jobs) == 1:
                _settle(jobs[0], exc=e)
                return
            # an input is at fault but not named: halve the group until it is found
            half = len(jobs) // 2
            await self._run_group(jobs[:half])
            await self._run_group(jobs[half:])
            return
        except Exception as e:  # noqa: BLE001 — handed to the request, which answers 500
            for job in jobs:
                _settle(job, exc=e)
            return
        for job, result in zip(jobs, results):
            _settle(job, result=result)

    def _timed_run(self, jobs: list[_Job]) -> list:
        t0 = time.perf_counter()
        results = self._run([j.payload for j in jobs], jobs[0].params)
        if len(results) != len(jobs):
            raise RuntimeError(f"batched call returned {len(results)} results for {len(jobs)}")
        if self._on_batch is not None:
            self._on_batch(sum(j.size for j in jobs), len(jobs), time.perf_counter() - t0)
        return results


def _settle(job: _Job, *, result: Any = None, exc: BaseException | None = None) -> None:
    # The client may have gone away (its future cancelled); nothing to deliver then.
    if job.future.done():
        return
    if exc is not None:
        job.future.set_exception(exc)
    else:
        job.future.set_result(result)
