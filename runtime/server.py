"""`bertonnx serve`: an export folder behind an HTTP JSON API, with dynamic batching.

Starlette on uvicorn (the optional `serve` extra; nothing else in the runtime imports them).

    POST /predict   {"inputs": ..., "parameters": {...}}  -> exactly the pipeline's output JSON
    GET  /health    503 while the model loads, 200 once it answers
    GET  /metrics   Prometheus text: requests by status, latency, batch sizes, queue depth

The request convention is Hugging Face's inference API: `inputs` is a text, a list of texts,
a {"text", "text_pair"} pair (classification) or a {"question", "context"} object (QA), or a
list of those; `parameters` are the pipeline's keyword arguments. Concurrent requests with
identical parameters are merged into one pipeline call by `batching.DynamicBatcher`.

Errors are JSON `{"error": ..., "type": ...}`: 400 for malformed JSON, wrong shapes, unknown or
bad parameters, 413 for bodies past --max-body-bytes, 503 while loading; a 500 names an id
that is in the server log and never carries a traceback. SIGTERM stops accepting connections,
answers every request already received, and exits 0.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import signal
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np

from .batching import BatchConfig, DynamicBatcher
from .defaults import resolve_export
from .errors import ArtifactError, BertOnnxError, InputError
from .manifest import Manifest

log = logging.getLogger("bertonnx.serve")

# Parameters a request may not set: the server decides batching, the inputs live in "inputs".
_RESERVED = {"self", "inputs", "args", "kwargs", "question", "context", "batch_size",
             "return_tensors"}  # numpy arrays mean nothing in JSON
# Tasks whose pipeline takes text pairs as {"text", "text_pair"} objects.
_PAIR_TASKS = {"text-classification"}


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"                  # loopback unless the user opens it up
    port: int = 8080                         # 0 = any free port (printed at start)
    batch: BatchConfig = BatchConfig()
    max_body_bytes: int = 1 << 20            # 1 MiB of JSON is ~ a few hundred contexts
    threads: int | None = None               # onnxruntime intra-op threads per call
    providers: str | None = None             # onnxruntime providers, e.g. "cuda,cpu"
    graceful_timeout_s: int = 30             # SIGTERM: how long in-flight requests may take


# -- errors ----------------------------------------------------------------------------------


class ClientError(Exception):
    """A request the server refuses: HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, kind: str = "InputError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": message, "type": kind}).encode()


# -- metrics ---------------------------------------------------------------------------------

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class _Histogram:
    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)   # per bucket, not cumulative
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break
        self.total += 1
        self.sum += value

    def render(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}')
        suffix = f"{{{labels}}}" if labels else ""
        lines.append(f"{name}_sum{suffix} {self.sum:.9g}")
        lines.append(f"{name}_count{suffix} {self.total}")
        return lines


class Metrics:
    """Counters and histograms for /metrics; batch hooks run on worker threads, hence the lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.latency = _Histogram(_LATENCY_BUCKETS)
        self.batch_inputs = _Histogram(_SIZE_BUCKETS)
        self.batch_requests = _Histogram(_SIZE_BUCKETS)
        self.batch_seconds = _Histogram(_LATENCY_BUCKETS)
        self.batch_max = 0
        self.in_flight = 0

    def request_done(self, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[str(status)] = self.requests.get(str(status), 0) + 1
            self.latency.observe(seconds)

    def batch_done(self, inputs: int, requests: int, seconds: float) -> None:
        with self._lock:
            self.batch_inputs.observe(inputs)
            self.batch_requests.observe(requests)
            self.batch_seconds.observe(seconds)
            self.batch_max = max(self.batch_max, inputs)

    def render(self, *, ready: bool, queued: int) -> str:
        p = "bertonnx"
        with self._lock:
            # (name, type, help, sample lines): one row per metric, Prometheus text format 0.0.4
            metrics = [
                ("requests_total", "counter", "Prediction requests answered, by HTTP status.",
                 [f'{p}_requests_total{{status="{s}"}} {n}'
                  for s, n in sorted(self.requests.items())]),
                ("request_duration_seconds", "histogram", "Time from request to answer.",
                 self.latency.render(f"{p}_request_duration_seconds")),
                ("batch_size", "histogram", "Inputs per pipeline call.",
                 self.batch_inputs.render(f"{p}_batch_size")),
                ("batch_requests", "histogram", "Requests merged into one pipeline call.",
                 self.batch_requests.render(f"{p}_batch_requests")),
                ("batch_duration_seconds", "histogram", "Time of one pipeline call.",
                 self.batch_seconds.render(f"{p}_batch_duration_seconds")),
                ("batch_size_max", "gauge", "Largest batch so far.",
                 [f"{p}_batch_size_max {self.batch_max}"]),
                ("in_flight_requests", "gauge", "Requests received and not yet answered.",
                 [f"{p}_in_flight_requests {self.in_flight}"]),
                ("queue_depth", "gauge", "Requests waiting for a batch.",
                 [f"{p}_queue_depth {queued}"]),
                ("model_ready", "gauge", "1 once the model answers.",
                 [f"{p}_model_ready {int(ready)}"]),
            ]
        out = []
        for name, kind, text, lines in metrics:
            out += [f"# HELP {p}_{name} {text}", f"# TYPE {p}_{name} {kind}", *lines]
        return "\n".join(out) + "\n"


# -- requests --------------------------------------------------------------------------------


def _is_text_input(task: str, x: Any) -> bool:
    if isinstance(x, str):
        return task != "question-answering"
    if not isinstance(x, dict):
        return False
    if task == "question-answering":
        return set(x) == {"question", "context"} and all(isinstance(v, str) for v in x.values())
    if task in _PAIR_TASKS:
        return ("text" in x and set(x) <= {"text", "text_pair"}
                and all(isinstance(v, str) for v in x.values()))
    return False


def _is_list_item(task: str, x: Any) -> bool:
    # A [text, text_pair] list is a pair inside a list of inputs, as the pipeline reads it.
    if task in _PAIR_TASKS and isinstance(x, list):
        return len(x) == 2 and all(isinstance(v, str) for v in x)
    return _is_text_input(task, x)


def _shape_hint(task: str) -> str:
    if task == "question-answering":
        return 'send {"question": "...", "context": "..."} or a list of such objects'
    if task in _PAIR_TASKS:
        return 'send a text, {"text": "...", "text_pair": "..."}, or a list of those'
    return "send a text or a list of texts"


@dataclass(frozen=True)
class Parsed:
    inputs: Any          # one input, or a list of them
    single: bool         # inputs is one input (not a list)
    params: dict

    @property
    def size(self) -> int:
        return 1 if self.single else len(self.inputs)


def parse_request(task: str, body: bytes, allowed: frozenset[str] | None) -> Parsed:
    """Validate a /predict body; ClientError(400) names what is wrong and how to fix it."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ClientError(400, f"body is not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise ClientError(400, 'body must be a JSON object {"inputs": ..., "parameters": {...}}')
    extra = set(data) - {"inputs", "parameters"}
    if extra:
        raise ClientError(400, f"unknown body fields {sorted(extra)}; "
                               'only "inputs" and "parameters" are read')
    if "inputs" not in data:
        raise ClientError(400, 'body lacks "inputs"; ' + _shape_hint(task))
    inputs, params = data["inputs"], data.get("parameters") or {}
    if not isinstance(params, dict):
        raise ClientError(400, '"parameters" must be a JSON object of pipeline arguments')
    if allowed is not None:
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ClientError(400, f"unknown parameters {unknown} for {task}; "
                                   f"allowed: {', '.join(sorted(allowed)) or 'none'}")
    if isinstance(inputs, list):
        if not inputs:
            raise ClientError(400, '"inputs" is an empty list; ' + _shape_hint(task))
        bad = [i for i, x in enumerate(inputs) if not _is_list_item(task, x)]
        if bad:
            raise ClientError(400, f'"inputs" item {bad[0]} has the wrong shape for {task}; '
                                   + _shape_hint(task))
        return Parsed(inputs, False, params)
    if not _is_text_input(task, inputs):
        raise ClientError(400, f'"inputs" has the wrong shape for {task}; ' + _shape_hint(task))
    return Parsed(inputs, True, params)


def allowed_parameters(pipeline) -> frozenset[str] | None:
    """Keyword arguments the pipeline's __call__ names (None: it takes **kwargs, let it judge)."""
    try:
        sig = inspect.signature(pipeline.__call__)
    except (TypeError, ValueError):
        return None
    names = set()
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            return None
        if p.kind is p.VAR_POSITIONAL or (i == 0 and p.kind is p.POSITIONAL_ONLY):
            continue
        names.add(p.name)
    first = next(iter(sig.parameters), None)
    return frozenset(names - _RESERVED - {first})


# -- one pipeline call for many requests -----------------------------------------------------


class PipelineRunner:
    """Runs a group of requests (same parameters) as ONE pipeline call and splits the answer.

    Each request's answer must equal `pipeline(request.inputs, **params)`. A list in gives a
    list out (even of one), so a list request takes its slice of the merged answer; a single
    input's answer is its element, re-shaped by `_as_single` where the pipeline keeps a
    transformers quirk. A group of one request is passed through untouched.
    """

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.task = pipeline.task

    def __call__(self, requests: list[Parsed], params: dict) -> list:
        if len(requests) == 1:
            return [self.pipeline(requests[0].inputs, **params)]
        flat, spans = [], []
        for r in requests:
            items = [r.inputs] if r.single else list(r.inputs)
            spans.append((len(flat), len(items)))
            flat.extend(items)
        out = self.pipeline(flat, **params)
        if not isinstance(out, list) or len(out) != len(flat):
            raise RuntimeError(f"pipeline returned {type(out).__name__} of "
                               f"{len(out) if isinstance(out, list) else '?'} for {len(flat)} inputs")
        results = []
        for r, (start, n) in zip(requests, spans):
            part = out[start:start + n]
            results.append(self._as_single(r.inputs, part[0], params) if r.single else part)
        return results

    def _as_single(self, x, result, params: dict):
        # transformers' text-classification wraps a lone text's answer in a list unless top_k
        # was given ("This pipeline is odd" in its __call__); the other tasks return the element.
        if self.task == "text-classification" and isinstance(x, str) and "top_k" not in params:
            return [result]
        return result


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


# -- the app ---------------------------------------------------------------------------------


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


def create_app(model_dir: str | Path, options: ServeOptions = ServeOptions(), *,
               loader=None, on_fatal=None):
    """The Starlette app; the model loads in the background once it starts.

    `loader()` returns the pipeline (default: `bertonnx.runtime.load` on model_dir with the
    options' providers/threads); `on_fatal()` is called if loading fails."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse, Response
    from starlette.routing import Route

    state = _State(Path(model_dir), options, on_fatal=on_fatal)

    def load():
        from . import load as load_pipeline

        # One server batch = one micro-batch of the pipeline (it splits longer lists).
        return load_pipeline(state.model_dir, providers=options.providers, threads=options.threads,
                             batch_size=options.batch.max_batch_size)

    async def load_in_background():
        try:
            pipe = await asyncio.get_running_loop().run_in_executor(None, loader or load)
        except BertOnnxError as e:
            state.load_error = str(e)
            log.error("cannot load %s: %s", state.model_dir, e)
            if state.on_fatal:
                state.on_fatal()
            return
        except Exception as e:  # noqa: BLE001 — reported, then the server stops
            state.load_error = f"{type(e).__name__}: {e}"
            log.exception("cannot load %s", state.model_dir)
            if state.on_fatal:
                state.on_fatal()
            return
        state.pipeline = pipe
        state.allowed = allowed_parameters(pipe)
        batcher = DynamicBatcher(PipelineRunner(pipe), options.batch,
                                 on_batch=state.metrics.batch_done,
                                 arriving=lambda: state.arriving)
        batcher.start()
        state.batcher = batcher
        log.info("model ready: %s (%s)", state.model_dir, pipe.task)

    @asynccontextmanager
    async def lifespan(app):
        # Load in the background so /health can say 503 while it happens (readiness probes).
        state.loading = asyncio.get_running_loop().create_task(load_in_background())
        yield
        # uvicorn has answered every in-flight request by now; finish anything still queued.
        if not state.loading.done():
            state.loading.cancel()
        if state.batcher is not None:
            await state.batcher.close()

    async def read_body(request: Request) -> bytes:
        limit = options.max_body_bytes
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

    async def predict(request: Request) -> Response:
        t0 = time.perf_counter()
        state.metrics.in_flight += 1
        status = 500
        try:
            if not state.ready:
                status = 503
                return Response(_error_body("the model is still loading; retry shortly"
                                            if state.load_error is None else
                                            "the model failed to load", "NotReady"),
                                503, media_type="application/json",
                                headers={"Retry-After": "1"})
            try:
                state.arriving += 1
                try:
                    body = await read_body(request)
                    parsed = parse_request(state.pipeline.task, body, state.allowed)
                finally:
                    state.arriving -= 1
                result = await state.batcher.submit(parsed, parsed.size, parsed.params)
            except ClientError as e:
                status = e.status
                return Response(_error_body(e.message, e.kind), e.status,
                                media_type="application/json")
            except ArtifactError:
                raise  # the export broke under us: a server fault, answered 500 below
            except BertOnnxError as e:  # the pipeline judged the input or a parameter
                status = 400
                return Response(_error_body(str(e), type(e).__name__), 400,
                                media_type="application/json")
            body = json.dumps(result, default=_jsonable, ensure_ascii=False).encode()
            status = 200
            return Response(body, 200, media_type="application/json")
        except Exception:
            incident = uuid.uuid4().hex[:12]
            log.exception("internal error %s on /predict", incident)
            return Response(_error_body(f"internal error {incident}; see the server log",
                                        "InternalError"), 500, media_type="application/json")
        finally:
            state.metrics.in_flight -= 1
            state.metrics.request_done(status, time.perf_counter() - t0)

    async def health(request: Request) -> Response:
        if state.ready:
            return JSONResponse({"status": "ok", "task": state.pipeline.task})
        if state.load_error is not None:
            return JSONResponse({"status": "failed", "error": state.load_error}, 503)
        return JSONResponse({"status": "loading"}, 503)

    async def metrics(request: Request) -> Response:
        text = state.metrics.render(ready=state.ready,
                                    queued=state.batcher.queued if state.batcher else 0)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return JSONResponse({"error": exc.detail, "type": "HTTPError"}, exc.status_code,
                            headers=getattr(exc, "headers", None))

    async def server_error(request: Request, exc: Exception) -> Response:
        incident = uuid.uuid4().hex[:12]
        log.error("internal error %s on %s: %r", incident, request.url.path, exc)
        return JSONResponse({"error": f"internal error {incident}; see the server log",
                             "type": "InternalError"}, 500)

    app = Starlette(
        routes=[Route("/predict", predict, methods=["POST"]),
                Route("/health", health, methods=["GET"]),
                Route("/metrics", metrics, methods=["GET"])],
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.bertonnx = state
    return app


# -- running it ------------------------------------------------------------------------------


def bind(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so a taken port is one clear error and --port 0 works."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise InputError(f"cannot resolve host {host!r} ({e.strerror})",
                         "pass --host 127.0.0.1, 0.0.0.0 or a local address") from None
    family, kind, proto, _, addr = infos[0]
    # proto must be IPPROTO_TCP: asyncio sets TCP_NODELAY only on such sockets, and without it
    # Nagle + delayed ACK hold every response back ~40 ms.
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror})",
                         "pick another --port, or stop what is using it") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_server(model_dir: str | Path, options: ServeOptions = ServeOptions(), *,
               log_level: str = "warning", announce=print) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status (0 after a clean drain)."""
    import uvicorn

    model_dir = resolve_export(model_dir)  # `default`: the shipped export (runtime/defaults.py)
    manifest = Manifest.read(model_dir, verify=False)  # a wrong folder fails here, in one line
    if options.max_body_bytes < 1:
        raise InputError(f"max body bytes must be ≥ 1, got {options.max_body_bytes}",
                         "pass --max-body-bytes 1 or more")
    sock = bind(options.host, options.port)
    failed = []

    def on_fatal():
        failed.append(True)
        server.should_exit = True

    app = create_app(model_dir, options, on_fatal=on_fatal)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=options.graceful_timeout_s,
                            server_header=False)
    server = uvicorn.Server(config)
    host, port = sock.getsockname()[:2]
    announce(f"bertonnx: serving {model_dir} ({manifest.task}) on http://{host}:{port} "
             "— POST /predict, GET /health, GET /metrics")
    # uvicorn drains on SIGTERM, then re-raises the signal so the default action would kill
    # the process with status 143; by then the drain is done, so ours just lets it return 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if failed:
        raise ArtifactError(f"the server stopped: {app.state.bertonnx.load_error}",
                            "check the export folder with `bertonnx parity` or export again")
    return 0


@click.command("serve")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 opens it to the network).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free port, printed at start).")
@click.option("--max-batch-size", default=32, show_default=True, type=click.IntRange(1),
              help="Most inputs merged into one model call.")
@click.option("--max-wait-ms", default=5.0, show_default=True, type=click.FloatRange(0),
              help="Longest a request waits for others to batch with.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1),
              help="Model calls run at once (threads sharing one onnxruntime session).")
@click.option("--max-body-bytes", default=1 << 20, show_default=True, type=click.IntRange(1),
              help="Largest request body; larger ones get 413.")
@click.option("--threads", default=None, type=click.IntRange(0),
              help="onnxruntime intra-op threads per call [default: onnxruntime's].")
@click.option("--providers", default=None, help="onnxruntime providers, e.g. cuda,cpu.")
@click.pass_context
def serve(ctx, model_dir, host, port, max_batch_size, max_wait_ms, workers, max_body_bytes,
          threads, providers):
    """Serve the export in DIR over HTTP: POST /predict, GET /health, GET /metrics."""
    debug = bool((ctx.find_root().obj or {}).get("debug"))
    options = ServeOptions(host=host, port=port,
                           batch=BatchConfig(max_batch_size, max_wait_ms, workers),
                           max_body_bytes=max_body_bytes, threads=threads, providers=providers)
    logging.getLogger("bertonnx").setLevel(logging.INFO)
    return run_server(model_dir, options, log_level="debug" if debug else "warning",
                      announce=lambda line: click.echo(line, err=True))
