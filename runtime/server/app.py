"""The Starlette app: POST /predict, GET /health, GET /metrics, one named handler each.

The model loads in the background once the app starts, so /health can answer 503 while it
happens (readiness probes); requests then go through the protocol (protocol.py) into the
dynamic batcher (batching.py), which calls the pipeline.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArtifactError, BertOnnxError
from .batching import DynamicBatcher
from .metrics import Metrics
from .protocol import (ClientError, PipelineRunner, allowed_parameters, error_body, jsonable,
                       parse_request)
from .settings import ServeOptions

log = logging.getLogger("bertonnx.serve")


@dataclass
class _State:
    model_dir: Path
    options: ServeOptions
    metrics: Metrics = field(default_factory=Metrics)
    pipeline: Any = None
    allowed: frozenset[str] | None = None
    batcher: DynamicBatcher | None = None
    arriving: int = 0                        # /predict requests being read or parsed
    load_error: str | None = None
    loading: asyncio.Task | None = None
    on_fatal: Any = None                     # called if loading fails (the CLI stops the server)

    @property
    def ready(self) -> bool:
        return self.batcher is not None


def _json_error(message: str, kind: str, status: int, headers: dict | None = None):
    from starlette.responses import Response

    return Response(error_body(message, kind), status, media_type="application/json",
                    headers=headers)


class _Handlers:
    """What the app does, by route; `state` is what they share (also `app.state.bertonnx`)."""

    def __init__(self, state: _State, loader):
        self.state, self.options = state, state.options
        self.loader = loader or self.load

    # -- loading --------------------------------------------------------------------------

    def load(self):
        from .. import load as load_pipeline

        # One server batch = one micro-batch of the pipeline (it splits longer lists).
        return load_pipeline(self.state.model_dir, providers=self.options.providers,
                             threads=self.options.threads,
                             batch_size=self.options.batch.max_batch_size)

    def _failed(self, message: str) -> None:
        self.state.load_error = message
        if self.state.on_fatal:
            self.state.on_fatal()

    async def load_in_background(self) -> None:
        state = self.state
        try:
            pipe = await asyncio.get_running_loop().run_in_executor(None, self.loader)
        except BertOnnxError as e:
            log.error("cannot load %s: %s", state.model_dir, e)
            self._failed(str(e))
            return
        except Exception as e:  # noqa: BLE001 — reported, then the server stops
            log.exception("cannot load %s", state.model_dir)
            self._failed(f"{type(e).__name__}: {e}")
            return
        state.pipeline = pipe
        state.allowed = allowed_parameters(pipe)
        batcher = DynamicBatcher(PipelineRunner(pipe), self.options.batch,
                                 on_batch=state.metrics.batch_done,
                                 arriving=lambda: state.arriving)
        batcher.start()
        state.batcher = batcher
        log.info("model ready: %s (%s)", state.model_dir, pipe.task)

    @asynccontextmanager
    async def lifespan(self, app):
        state = self.state
        state.loading = asyncio.get_running_loop().create_task(self.load_in_background())
        yield
        # uvicorn has answered every in-flight request by now; finish anything still queued.
        if not state.loading.done():
            state.loading.cancel()
        if state.batcher is not None:
            await state.batcher.close()

    # -- /predict -------------------------------------------------------------------------

    async def read_body(self, request) -> bytes:
        limit = self.options.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise ClientError(400, "Content-Length is not a number") from None
            if declared > limit:
                raise ClientError(413, f"body of {declared} bytes is over the limit of {limit} "
                                       "bytes; split the inputs over several requests",
                                  "PayloadTooLarge")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ClientError(413, f"body is over the limit of {limit} bytes; split the "
                                       "inputs over several requests", "PayloadTooLarge")
            chunks.append(chunk)
        return b"".join(chunks)

    async def answer(self, request):
        """The pipeline's result for one request; raises ClientError / BertOnnxError."""
        state = self.state
        state.arriving += 1
        try:
            body = await self.read_body(request)
            parsed = parse_request(state.pipeline.task, body, state.allowed)
        finally:
            state.arriving -= 1
        return await state.batcher.submit(parsed, parsed.size, parsed.params)

    async def predict(self, request):
        from starlette.responses import Response

        state = self.state
        t0 = time.perf_counter()
        state.metrics.in_flight += 1
        status = 500
        try:
            if not state.ready:
                status = 503
                return _json_error("the model is still loading; retry shortly"
                                   if state.load_error is None else "the model failed to load",
                                   "NotReady", 503, {"Retry-After": "1"})
            try:
                result = await self.answer(request)
            except ClientError as e:
                status = e.status
                return _json_error(e.message, e.kind, e.status)
            except ArtifactError:
                raise  # the export broke under us: a server fault, answered 500 below
            except BertOnnxError as e:  # the pipeline judged the input or a parameter
                status = 400
                return _json_error(str(e), type(e).__name__, 400)
            body = json.dumps(result, default=jsonable, ensure_ascii=False).encode()
            status = 200
            return Response(body, 200, media_type="application/json")
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("internal error %s on /predict", incident)
            return _json_error(f"internal error {incident}; see the server log",
                               "InternalError", 500)
        finally:
            state.metrics.in_flight -= 1
            state.metrics.request_done(status, time.perf_counter() - t0)

    # -- /health, /metrics, errors --------------------------------------------------------

    async def health(self, request):
        from starlette.responses import JSONResponse

        state = self.state
        if state.ready:
            return JSONResponse({"status": "ok", "task": state.pipeline.task})
        if state.load_error is not None:
            return JSONResponse({"status": "failed", "error": state.load_error}, 503)
        return JSONResponse({"status": "loading"}, 503)

    async def metrics(self, request):
        from starlette.responses import PlainTextResponse

        state = self.state
        text = state.metrics.render(ready=state.ready,
                                    queued=state.batcher.queued if state.batcher else 0)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def http_error(self, request, exc):
        from starlette.responses import JSONResponse

        return JSONResponse({"error": exc.detail, "type": "HTTPError"}, exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def server_error(self, request, exc):
        from starlette.responses import JSONResponse

        incident = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s: %r", incident, request.url.path, exc)
        return JSONResponse({"error": f"internal error {incident}; see the server log",
                             "type": "InternalError"}, 500)


def create_app(model_dir: str | Path, options: ServeOptions = ServeOptions(), *,
               loader=None, on_fatal=None):
    """The Starlette app; the model loads in the background once it starts.

    `loader()` returns the pipeline (default: `bertonnx.runtime.load` on model_dir with the
    options' providers/threads); `on_fatal()` is called if loading fails."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.routing import Route

    h = _Handlers(_State(Path(model_dir), options, on_fatal=on_fatal), loader)
    app = Starlette(
        routes=[Route("/predict", h.predict, methods=["POST"]),
                Route("/health", h.health, methods=["GET"]),
                Route("/metrics", h.metrics, methods=["GET"])],
        lifespan=h.lifespan,
        exception_handlers={HTTPException: h.http_error, Exception: h.server_error},
    )
    app.state.bertonnx = h.state
    return app
