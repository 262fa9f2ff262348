"""How much work the server holds, and for how long: `--max-queued-inputs` and
`--request-timeout-s` (settings.Backpressure), for app.py's inference path.

    request ─> make_room(1) ─ full: 429 ─> body, JSON, inputs read ─> admitted(n) ─ no room: 429
               (before the body is read)                             (before tokenizing)
            ─> until_answered ─ client gone: dropped ─ deadline passed: 503, dropped ─> answer

`pending` counts the inputs of admitted requests not yet answered, queued or running, across
requests. The check and the count run with no await between them, so the cap is exact: a
burst of any size holds at most max(cap, --max-inputs) inputs (an idle server admits any one
request). Refusals carry Retry-After and are answered at once, while admitted work waits (TEI
answers 429 past its --max-concurrent-requests: try_acquire_permit, router/src/http/server.rs).
A request's deadline counts from its arrival; when it passes, or the client hangs up, the
request's queued parts are cancelled, and the batcher drops them unrun (batching.py).
"""
from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager

from .metrics import Metrics
from .protocol import ClientError


class ClientGone(Exception):
    """The client closed its connection before its answer: nothing is owed, nothing is sent."""

    def __init__(self, stage: str):
        super().__init__(stage)
        self.stage = stage


class Admission:
    """The inputs held for the model (`pending`) against `cap`, and each request's deadline."""

    def __init__(self, cap: int, timeout_s: float, metrics: Metrics):
        self.cap, self.timeout_s, self.metrics = cap, timeout_s, metrics
        self.pending = 0

    def deadline(self) -> float:
        """A request arriving now must be answered by this time.monotonic()."""
        return time.monotonic() + self.timeout_s

    def make_room(self, size: int) -> None:
        """ClientError 429 + Retry-After unless `size` more inputs fit under the cap (an idle
        server admits any request)."""
        if self.pending and self.pending + size > self.cap:
            raise ClientError(429, f"the server is busy: {self.pending} inputs are waiting for "
                                   f"the model, the most it holds is {self.cap} "
                                   "(--max-queued-inputs); retry after the Retry-After seconds",
                              "Overloaded", {"Retry-After": "1"})

    @contextmanager
    def admitted(self, size: int):
        """Holds `size` inputs while the block runs (make_room's 429 when they do not fit)."""
        self.make_room(size)
        self.pending += size
        try:
            yield
        finally:
            self.pending -= size

    async def until_answered(self, request, work, deadline: float):
        """`work`'s result, unless the client hangs up first (ClientGone) or `deadline`
        passes (ClientError 503); either way the work is cancelled and the batcher drops what
        has not started."""
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED,
                                         timeout=max(0.0, deadline - time.monotonic()))
            if task in done:
                return task.result()
            if watch in done:
                raise ClientGone("waiting")
            self.metrics.timed_out("request")
            raise ClientError(503, f"the request was not answered within {self.timeout_s:g} s "
                                   "of its arrival (--request-timeout-s): the server is busy; "
                                   "its work was dropped, retry later", "DeadlineExceeded",
                              {"Retry-After": "1"})
        finally:
            for t in (task, watch):
                if not t.done():
                    t.cancel()


async def _disconnected(request) -> None:
    """Returns once the client has closed the connection (the body is read by then, so the
    only message left to receive is http.disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
