"""The Starlette app: POST /predict, GET /health, GET /metrics, one named handler each; the
OpenAI (openai.py), Open Inference Protocol v2 (v2.py), TEI (tei_routes.py) and Cohere
(cohere.py) routes on the same handlers, and /openapi.json and /docs (openapi.py) generated
from the route table (`ENDPOINTS`: each route's record, with the tasks whose exports serve it).

The models (one, or several: registry.py, each with its own pipeline and batcher) load in the
background once the app starts, so /health can answer 503 while they do (readiness probes);
a request is then given its model (`_Handlers.pick`: its `model`, or the one model of the
route's task) and goes through the protocol (protocol.py) into that model's dynamic batcher
(batching.py), which calls the pipeline.

An inference request (/predict, /v1/embeddings, /v2/models/{name}/infer: `infer`, each route
with its wire.Wire for the body and answer formats) is read under a deadline (--body-timeout-s:
408), judged whole before it is queued (protocol.Prepared: 400/413 naming the parameter or the
limit), admitted only while the inputs held for the model stay within --max-queued-inputs (429
with Retry-After otherwise, before its inputs are tokenized), and while it waits for the model
its connection is watched: a client that goes away is counted apart (not a 5xx) and its queued
work is dropped; one not answered within --request-timeout-s of its arrival gets 503 and its
work not yet started is dropped, never computed (admission.py). With --api-key, every
route but the probes needs the key first (auth.py, around the whole app). On SIGTERM
(process.py calls `begin_drain`) the server answers what it has; what is still unanswered
--drain-timeout-s later gets 503 and the exit status 1.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..core.errors import ArtifactError, BertOnnxError, ConfigError
from . import cohere, openai, openapi, tei_routes, v2
from .admission import Admission, ClientGone
from .auth import RequireApiKey, open_paths
from .metrics import Metrics, ModelRows
from .protocol import ClientError, Prepared
from .registry import Model, ModelSource, Registry
from .settings import ServeOptions
from .wire import Wire

# A request with more characters than this is priced (tokenized) in a thread, not on the
# event loop: ~0.2 ms of tokenizing stays inline, where a thread hop would cost as much.
_INLINE_CHARS = 2_000

log = logging.getLogger("bertonnx.serve")


@dataclass
class _State:
    """The server's: its models (registry.py), the options, the drain, what is being read."""

    models: Registry
    options: ServeOptions
    metrics: Metrics = field(default_factory=Metrics)   # server-wide (the model's, for one)
    # /predict requests not yet queued -> when their last bytes arrived (the batcher's hint)
    reading: dict[int, float] = field(default_factory=dict)
    scopes: set = field(default_factory=set)  # each /predict's asyncio.Timeout: a drain cuts them
    draining: bool = False                    # SIGTERM came: answer what is here, then stop
    cutting: bool = False                     # the drain timeout passed: the rest get 503
    cut: int = 0                              # requests the drain timeout answered 503
    loading: asyncio.Task | None = None
    on_fatal: Any = None                     # called if loading fails (the CLI stops the server)

    @property
    def ready(self) -> bool:
        return self.models.ready

    @property
    def load_error(self) -> str | None:
        return self.models.load_error

    # the first model's, for what serves one model (process.py's banner, Ray, the probes)
    @property
    def name(self) -> str:
        """The model's name on the protocols that name it (/v1/models, /v2/models/{name}):
        --name, else the export folder's name."""
        return self.models.first.name

    @property
    def model_dir(self) -> Path:
        return self.models.first.model_dir

    @property
    def pipeline(self):
        return self.models.first.pipeline

    def arriving(self) -> int:
        """Requests being received that showed progress within max_wait: the batch may wait
        for those. A stalled upload stops counting max_wait after its last bytes, so it never
        holds a batch back (it is cut at --body-timeout-s)."""
        horizon = time.monotonic() - self.options.batch.max_wait_ms / 1000
        return sum(1 for t in self.reading.values() if t >= horizon)

    def begin_drain(self) -> None:
        """SIGTERM: from now on the drain clock runs (call on the event loop)."""
        if not self.draining:
            self.draining = True
            loop = asyncio.get_running_loop()
            loop.call_later(self.options.timeouts.drain_s, self.cut_all)

    def cut_all(self) -> None:
        """The drain timeout: every /predict still in progress ends now with 503."""
        self.cutting = True
        now = asyncio.get_running_loop().time()
        for scope in list(self.scopes):
            scope.reschedule(now)


class _Handlers:
    """What the app does, by route; `state` is what they share (also `app.state.bertonnx`)."""

    def __init__(self, state: _State):
        self.state, self.options = state, state.options
        pressure = self.options.backpressure
        self.admission = Admission(pressure.cap(self.options.batch, self.options.limits),
                                   pressure.request_timeout_s, state.metrics)

    # -- loading --------------------------------------------------------------------------

    async def load_in_background(self) -> None:
        """Every model, one after another (each loads in a thread); the first that fails
        stops the server."""
        state = self.state
        models = state.models
        calls = self.options.model_calls(len(models))
        # one model at its --workers needs no shared bound: it is its own
        shared = asyncio.Semaphore(calls) if calls < self.options.batch.workers * len(models) \
            else None
        for model in models:
            if not await model.start(state.arriving, shared):
                if state.on_fatal:
                    state.on_fatal()
                return

    @asynccontextmanager
    async def lifespan(self, app):
        state = self.state
        state.loading = asyncio.get_running_loop().create_task(self.load_in_background())
        yield
        # uvicorn has answered every in-flight request by now; finish anything still queued.
        if not state.loading.done():
            state.loading.cancel()
        for model in state.models:
            if model.batcher is not None:
                await model.batcher.close()

    # -- /predict -------------------------------------------------------------------------

    async def read_body(self, request, key: int) -> bytes:
        """The body, within --max-body-bytes (413) and --body-timeout-s (408, connection
        closed); ClientGone if the client hangs up meanwhile."""
        limits, reading = self.options.limits, self.state.reading
        limit = limits.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise ClientError(400, "Content-Length is not a number") from None
            if declared > limit:
                raise ClientError(413, f"body of {declared} bytes is over the limit of {limit} "
                                       "bytes (--max-body-bytes); split the inputs over "
                                       "several requests", "PayloadTooLarge")
        chunks, size = [], 0
        seconds = self.options.timeouts.body_s
        try:
            async with asyncio.timeout(seconds):
                async for chunk in request.stream():
                    reading[key] = time.monotonic()
                    size += len(chunk)
                    if size > limit:
                        raise ClientError(413, f"body is over the limit of {limit} bytes "
                                               "(--max-body-bytes); split the inputs over "
                                               "several requests", "PayloadTooLarge")
                    chunks.append(chunk)
        except TimeoutError:
            self.state.metrics.timed_out("body")
            raise ClientError(408, f"the body did not arrive within {seconds:g} s "
                                   "(--body-timeout-s)", "Timeout",
                              {"connection": "close"}) from None
        except ClientDisconnect:
            raise ClientGone("body") from None
        return b"".join(chunks)

    def pick(self, request, wire: Wire, body: bytes) -> Model:
        """The model the request is for (registry.Registry.pick), kept on the request for
        the metrics."""
        model = self.state.models.pick(wire.model_of(request, body), wire.tasks,
                                       request.url.path, wire.unknown_model)
        request.state.model = model
        return model

    async def answer(self, request, wire: Wire):
        """The response to one request, read and written by `wire`; raises ClientError /
        BertOnnxError / ClientGone."""
        state, options = self.state, self.options
        admission = self.admission
        deadline = admission.deadline()
        admission.make_room(1)   # full already: 429 before the body is even read
        key = id(request)
        state.reading[key] = time.monotonic()
        try:
            body = await self.read_body(request, key)
            model = self.pick(request, wire, body)
            pipe = model.pipeline
            call = wire.parse(model, request, body)
            if call.parsed is None:   # answered without the model
                return await _inline_or_thread(len(body), wire.respond, None, call, None)
            prepared = Prepared.check(pipe, call.parsed, options.limits)
            parts = prepared.cut(options.batch.part)
            with admission.admitted(sum(size for _, size in parts)):   # before tokenizing
                work = await _inline_or_thread(len(body), wire.price, prepared, pipe,
                                               options.limits, call)
                state.reading.pop(key, None)   # queued from here: no longer arriving
                results = await admission.until_answered(
                    request, model.batcher.submit_parts(parts, prepared.params), deadline)
        finally:
            state.reading.pop(key, None)
        return wire.respond(prepared.answer(pipe, results), call, work)

    async def predict(self, request):
        # Hugging Face's convention; TEI's on a classifier's body with TEI's fields
        return await self.infer(request, tei_routes.PREDICT_ROUTE)

    async def infer(self, request, wire: Wire):
        """One inference request of any protocol, start to finish: readiness, the drain, the
        answer, the error statuses and the metrics."""
        state = self.state
        t0 = time.perf_counter()
        state.metrics.in_flight += 1
        status = 500
        try:
            if not state.ready:
                status = 503
                return wire.error(503, "the model is still loading; retry shortly"
                                  if state.load_error is None else "the model failed to load",
                                  "NotReady", {"Retry-After": "1"})
            if state.cutting:
                status = 503
                state.cut += 1
                return wire.error(503, _SHUTTING_DOWN, "ShuttingDown")
            try:
                async with asyncio.timeout(None) as scope:   # the drain's handle on it
                    state.scopes.add(scope)
                    try:
                        response = await self.answer(request, wire)
                    finally:
                        state.scopes.discard(scope)
            except TimeoutError:
                if not state.cutting:
                    raise
                status = 503
                state.cut += 1
                return wire.error(503, _SHUTTING_DOWN, "ShuttingDown")
            except ClientGone as e:
                status = None   # no answer was owed: counted apart, never as a 5xx
                state.metrics.client_gone(e.stage)
                return Response(status_code=204)   # nobody is there to read it
            except ClientError as e:
                status = e.status
                return wire.error(e.status, e.message, e.kind, e.headers,
                                  getattr(e, "parameter", None))
            except ArtifactError:
                raise  # the export broke under us: a server fault, answered 500 below
            except BertOnnxError as e:  # the pipeline judged the input or a parameter
                status = 400
                return wire.error(400, str(e), type(e).__name__,
                                  parameter=getattr(e, "parameter", None))
            status = response.status_code
            return response
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("internal error %s on %s", incident, request.url.path)
            return wire.error(500, f"internal error {incident}; see the server log",
                              "InternalError")
        finally:
            state.metrics.in_flight -= 1
            if status is not None:   # counted for its model, where it named one
                model = getattr(request.state, "model", None)
                (model.metrics if model else state.metrics).request_done(
                    status, time.perf_counter() - t0)

    # -- /health, /metrics, errors --------------------------------------------------------

    async def health(self, request):
        state = self.state
        if state.draining:
            return JSONResponse({"status": "draining"}, 503)
        if state.ready:
            if len(state.models) == 1:
                return JSONResponse({"status": "ok", "task": state.pipeline.task})
            return JSONResponse({"status": "ok", "models": {m.name: m.task
                                                            for m in state.models}})
        if state.load_error is not None:
            return JSONResponse({"status": "failed", "error": state.load_error}, 503)
        return JSONResponse({"status": "loading"}, 503)

    async def metrics(self, request):
        state = self.state
        rows = [ModelRows(m.name, m.metrics, m.ready, m.batcher.queued if m.batcher else 0,
                          _engine(m.pipeline)) for m in state.models]
        if len(rows) == 1:   # one model: its families unlabelled, as they always were
            text = state.metrics.render(ready=rows[0].ready, queued=rows[0].queued,
                                        inputs=self.admission.pending, engine=rows[0].engine)
        else:
            text = state.metrics.render(ready=state.ready, queued=0,
                                        inputs=self.admission.pending, models=rows)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def http_error(self, request, exc):
        return JSONResponse({"error": exc.detail, "type": "HTTPError"}, exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def server_error(self, request, exc):
        incident = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s: %r", incident, request.url.path, exc)
        return JSONResponse({"error": f"internal error {incident}; see the server log",
                             "type": "InternalError"}, 500)


# The route table: every route's Endpoint record (the exports that serve it, its OpenAPI entry)
ENDPOINTS = (*tei_routes.with_tei_predict(openapi.ENDPOINTS), *tei_routes.ENDPOINTS,
             *cohere.ENDPOINTS)
COMPONENTS = {"TeiError": tei_routes.ERROR_SCHEMA,   # the protocols' error bodies
              "CohereError": cohere.ERROR_SCHEMA}

_SHUTTING_DOWN = ("the server is shutting down and its drain timeout (--drain-timeout-s) "
                  "passed before this request was answered; retry on another instance")


def _engine(pipe) -> tuple[str, str] | None:
    """The engine and precision a pipeline runs on (None: not loaded, or not a session's)."""
    config = getattr(getattr(pipe, "session", None), "config", None)
    return (config.engine, config.precision) if config else None


async def _inline_or_thread(size: int, fn, *args):
    """fn(*args) for a request body of `size` bytes: on the event loop when short, in a thread
    when long (tokenizing it would hold up every other request)."""
    if size > _INLINE_CHARS:
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
    return fn(*args)


def create_app(model_dir: str | Path | Sequence[ModelSource],
               options: ServeOptions = ServeOptions(), *, loader=None, on_fatal=None):
    """The Starlette app; the models load in the background once it starts.

    `model_dir`: one export folder, served as --name or its folder's name, or several
    (`ModelSource`s: a name, a folder, a loader each). `loader()` returns the one model's
    pipeline (default: `bertonnx.runtime.load` on model_dir with the options'
    providers/threads); `on_fatal()` is called if loading fails."""
    if isinstance(model_dir, (str, Path)):
        sources = [ModelSource(options.name or Path(model_dir).name, Path(model_dir), loader)]
    else:
        sources = list(model_dir)
    server = Metrics()
    # one model keeps the server's counters (its /metrics unlabelled); several, their own
    several = len(sources) > 1
    registry = Registry({s.name: Model(s.name, s.folder, options,
                                       Metrics() if several else server, s.loader,
                                       several=several)
                         for s in sources})
    if len(registry) != len(sources):
        raise ConfigError(f"two models are named alike: {', '.join(s.name for s in sources)}",
                          "give each its own --name")
    h = _Handlers(_State(registry, options, server, on_fatal=on_fatal))
    keys = options.access.api_keys
    app = Starlette(
        routes=[Route("/predict", h.predict, methods=["POST"]),
                Route("/health", h.health, methods=["GET"]),
                Route("/metrics", h.metrics, methods=["GET"]),
                *openai.routes(h), *tei_routes.routes(h), *cohere.routes(h),
                *openapi.routes(h, ENDPOINTS, COMPONENTS), *v2.routes(h)],
        lifespan=h.lifespan,
        middleware=[Middleware(RequireApiKey, keys=keys,
                               open=frozenset().union(*(open_paths(n) for n in registry.names)))]
        if keys else [],
        exception_handlers={HTTPException: h.http_error, Exception: h.server_error},
    )
    app.state.bertonnx = h.state
    return app
