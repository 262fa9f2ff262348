"""`bertonnx serve DIR --ray ADDRESS`: the server app as a Ray Serve application.

    client ─HTTP─> Ray's proxy ─> Ingress (1 replica, 0 CPUs) ─handle─> ModelReplica × N
                   (--host/--port)  reads a request whole; re-sends    the whole Starlette app
                                    it if its replica dies; JSON 503   (create_app): every
                                    past --request-timeout-s           route, its own batcher

Every route of `create_app` comes along (the request travels as its raw method, path, headers
and body: relay.py), and each replica runs its own dynamic batcher, limits and /metrics (a
scrape of /metrics reaches one replica). Ray replaces a replica that dies; a replica counts as
ready only once its model answers (relay.Lifespan), so a replacement never answers "loading".

Why an ingress deployment in front of the model replicas, rather than `serve.ingress` on the
app: Ray's proxy answers a bare text 500 to a request whose replica dies while running it
(Ray 2.60, measured: 8 of 400 requests when one of two replicas was killed under load). The
ingress holds each request, sends it again to a live replica (predictions are idempotent) up
to `attempts` times, and answers a JSON 503 once its deadline or attempts are spent: a client
gets its answer or a clean 503, never a hang (Ray's own request timeout is a later backstop).

The export folder must be readable at the same path on every node that runs a replica (a
local cluster, or a shared filesystem), with bertonnx installed in the cluster's Python.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import re
import signal
import threading
import time
import uuid
from pathlib import Path

import ray
from ray import serve
from ray.exceptions import RayActorError
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE
from ray.serve.context import _get_global_client
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ..core.defaults import resolve_export
from ..core.errors import ArtifactError, InputError
from ..core.foreign import read_manifest
from ..core.ports import free_ports
from ..ray.cluster import join
from .app import create_app
from .protocol import error_body
from .registry import ModelSource
from .relay import HttpRequest, HttpResponse, Lifespan, exchange
from .settings import RayOptions, ServeOptions

# Serve sends the "ray.serve" logger of a replica to that replica's log file
log = logging.getLogger("ray.serve")
# No access log line per request (it costs more than a tiny model's call), warnings kept.
_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}

# the last line of a replica's traceback when bertonnx raised: "bertonnx....Error: message"
_OUR_ERROR = re.compile(r"^bertonnx\.[\w.]+Error: (.+)$", re.MULTILINE)
# Ray's proxy gives up this long after the ingress would have answered 503 itself.
_BACKSTOP_S = 10.0


class ModelReplica:
    """One replica: the server's whole app in process, its models loaded before Ray routes
    requests to it. `model_dir`: one export folder, or (name, folder) pairs, every replica
    serving them all (one process, one session each, requests routed by `model`)."""

    async def __init__(self, model_dir: str | list[tuple[str, str]], options: ServeOptions):
        self.app = create_app(model_dir if isinstance(model_dir, str) else
                              [ModelSource(name, Path(d)) for name, d in model_dir], options)
        self.lifespan = Lifespan(self.app)
        await self.lifespan.startup()

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        return await exchange(self.app, request)

    async def check_health(self) -> None:
        state = self.app.state.bertonnx
        if not state.ready:
            raise RuntimeError(f"model not ready: {state.load_error or 'loading'}")

    async def __del__(self):   # Serve awaits it on a graceful stop: finish the queued work
        await self.lifespan.shutdown()


class Ingress:
    """Reads a request whole, has a model replica answer it, re-sends it when the replica
    dies under it; 503 when the deadline or the attempts run out."""

    def __init__(self, model, options: ServeOptions, ray_options: RayOptions):
        self.model = model
        self.max_body = options.limits.max_body_bytes
        self.body_s = options.timeouts.body_s
        self.timeout_s = ray_options.request_timeout_s
        self.attempts = ray_options.attempts

    async def __call__(self, request):
        try:
            record = await self._read(request)
        except TimeoutError:
            return _response(HttpResponse(408, _JSON, error_body(
                f"the body did not arrive within {self.body_s:g} s (--body-timeout-s)",
                "Timeout")))
        except ClientDisconnect:
            return _response(HttpResponse(204, (), b""))   # nobody is there to read it
        return _response(await self.forward(record))

    async def _read(self, request) -> HttpRequest:
        # past --max-body-bytes the app answers 413 from what arrived; no need to hold more
        chunks, size = [], 0
        async with asyncio.timeout(self.body_s):
            async for chunk in request.stream():
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_body:
                    break
        scope = request.scope
        return HttpRequest(scope["method"], scope["path"], scope.get("query_string", b""),
                           tuple(scope.get("headers", ())), b"".join(chunks),
                           tuple(scope["client"]) if scope.get("client") else None)

    async def forward(self, record: HttpRequest) -> HttpResponse:
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        for attempt in range(1, self.attempts + 1):
            try:
                async with asyncio.timeout_at(deadline):
                    answer = await self.model.remote(record)
                if attempt > 1:   # tells the client (and the tests) it was sent again
                    answer = dataclasses.replace(answer, headers=answer.headers + (
                        (b"x-bertonnx-attempts", str(attempt).encode()),))
                return answer
            except TimeoutError:
                return _unavailable(f"no replica answered within {self.timeout_s:g} s "
                                    "(--request-timeout-s); retry shortly", "Timeout")
            except RayActorError as e:
                log.warning("replica died under %s %s (attempt %d of %d): %s", record.method,
                            record.path, attempt, self.attempts, type(e).__name__)
            except (BackPressureError, DeploymentUnavailableError) as e:
                return _unavailable(f"no replica can take the request ({type(e).__name__}); "
                                    "retry shortly", "Overloaded")
            except Exception:  # noqa: BLE001 — one line for the client, the rest in the log
                incident = uuid.uuid4().hex[:12]
                log.exception("internal error %s on %s", incident, record.path)
                return HttpResponse(500, _JSON, error_body(
                    f"internal error {incident}; see the server log", "InternalError"))
        return _unavailable(f"the replicas serving this request died {self.attempts} times; "
                            "retry shortly", "ReplicaDied")


_JSON = ((b"content-type", b"application/json"),)


def _unavailable(message: str, kind: str) -> HttpResponse:
    return HttpResponse(503, _JSON + ((b"retry-after", b"1"),), error_body(message, kind))


def _response(answer: HttpResponse):
    response = Response(answer.body, answer.status)
    # the app's own headers, content-length included, in its order
    names = {k.lower() for k, _ in answer.headers}
    response.raw_headers = [*answer.headers,
                            *((k, v) for k, v in response.raw_headers if k not in names)]
    return response


# -- the application --------------------------------------------------------------------------


def replica_config(options: ServeOptions, ray_options: RayOptions) -> dict:
    """`serve.deployment` keyword arguments of the model replicas."""
    config = {
        "max_ongoing_requests": (ray_options.max_ongoing_requests
                                 or 2 * options.batch.max_batch_size),
        "ray_actor_options": {"num_cpus": ray_options.replica_cpus},
        # a replica being stopped answers what it holds for this long (SIGTERM's drain)
        "graceful_shutdown_timeout_s": options.timeouts.drain_s,
        "logging_config": _LOGGING,
    }
    if ray_options.autoscaling:
        low, high = ray_options.bounds
        config["autoscaling_config"] = {
            "min_replicas": low, "max_replicas": high,
            "initial_replicas": min(max(ray_options.replicas, low), high),
            # one full batch waiting per replica is the load one replica is sized for
            "target_ongoing_requests": options.batch.max_batch_size}
    else:
        config["num_replicas"] = ray_options.replicas
    return config


def replica_options(options: ServeOptions, ray_options: RayOptions) -> ServeOptions:
    """Each replica's ServeOptions: onnxruntime gets the CPUs the replica reserves unless
    --threads says otherwise (N replicas on one machine would otherwise each take them all)."""
    threads = options.threads or max(1, math.ceil(ray_options.replica_cpus))
    return dataclasses.replace(options, threads=threads)


def application(model_dir: Path | list[tuple[str, Path]], options: ServeOptions,
                ray_options: RayOptions):
    """The bound Serve application: the ingress in front of the model replicas."""
    model_dir = str(model_dir) if isinstance(model_dir, Path) else [
        (name, str(d)) for name, d in model_dir]
    model = serve.deployment(ModelReplica, name="model", **replica_config(options, ray_options))
    ingress = serve.deployment(Ingress, name="ingress", num_replicas=1,
                               max_ongoing_requests=options.max_connections,
                               ray_actor_options={"num_cpus": 0}, logging_config=_LOGGING)
    return ingress.bind(model.bind(model_dir, replica_options(options, ray_options)),
                        options, ray_options)


# -- the command ------------------------------------------------------------------------------


def serve_on_ray(model_dir, options: ServeOptions, ray_options: RayOptions, *,
                 announce=print) -> int:
    """Deploy on the cluster, serve until SIGTERM/SIGINT, then delete the application
    (replicas answer what they hold first). Returns the exit status. `model_dir`: one export,
    or (name, folder) pairs served together by every replica."""
    # replicas start in other directories: absolute paths
    if isinstance(model_dir, (str, Path)):
        model_dir = resolve_export(model_dir).resolve()
        folders = [model_dir]
    else:
        model_dir = [(name, resolve_export(d).resolve()) for name, d in model_dir]
        folders = [d for _, d in model_dir]
    # a wrong folder fails here, in one line
    tasks = [read_manifest(d, verify=False).task for d in folders]
    port = options.port or free_ports(options.host, 1)[0]
    for name in ("ray", "ray.serve"):
        logging.getLogger(name).setLevel(logging.WARNING)
    join(ray_options.address)
    try:
        return _serve(model_dir, ", ".join(tasks), port, options, ray_options, announce)
    finally:
        ray.shutdown()


def _serve(model_dir, task, port, options, ray_options, announce) -> int:
    started = not _serve_running()
    serve.start(http_options={
        "host": options.host, "port": port,
        "request_timeout_s": ray_options.request_timeout_s + _BACKSTOP_S,
        "keep_alive_timeout_s": max(1, round(options.timeouts.keep_alive_s))})
    host, port = _proxy_address(options.host, port)
    serve.run_many([serve.RunTarget(application(model_dir, options, ray_options),
                                    name=ray_options.name, route_prefix="/")],
                   wait_for_ingress_deployment_creation=False,
                   wait_for_applications_running=False)
    try:
        _wait_running(ray_options)
    except BaseException:
        _stop(ray_options.name, started)
        raise
    scale = (f"{ray_options.bounds[0]}-{ray_options.bounds[1]} replicas (autoscaling)"
             if ray_options.autoscaling else f"{ray_options.replicas} replica(s)")
    served = model_dir if isinstance(model_dir, Path) else ", ".join(
        f"{d} as {name}" for name, d in model_dir)
    announce(f"bertonnx: serving {served} ({task}) on http://{host}:{port} with Ray Serve, "
             f"{scale} — POST /predict, GET /health, GET /metrics")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _stop(ray_options.name, started)
    return 0


def _wait_running(ray_options: RayOptions) -> None:
    """Until Serve runs the application (every replica's model loaded); a failed deployment,
    or one not running within --deploy-timeout-s (replicas that fit on no node), is one line
    instead of a wait for ever."""
    deadline = time.monotonic() + ray_options.deploy_timeout_s
    while True:
        app = serve.status().applications.get(ray_options.name)
        status = app.status if app is not None else "NOT_STARTED"
        if status == "RUNNING":
            return
        if status == "DEPLOY_FAILED":
            model = app.deployments.get("model")
            ours = _OUR_ERROR.findall(model.message if model else "")
            if ours:   # the replica's own one line (problem and fix), from its traceback
                raise ArtifactError(f"the model replicas could not start: {ours[-1]}")
            raise ArtifactError(f"the Ray Serve deployment failed: {_first_line(app.message)}",
                                "check the export folder with `bertonnx parity`, and that it "
                                "is readable at the same path on the cluster's nodes")
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    total = ray.cluster_resources().get("CPU", 0)
    free = ray.available_resources().get("CPU", 0)
    model = app.deployments.get("model") if app is not None else None
    said = f"; Serve says: {_first_line(model.message)}" if model and model.message else ""
    replicas = replica_config(ServeOptions(), ray_options).get("autoscaling_config", {}).get(
        "initial_replicas", ray_options.replicas)
    raise InputError(f"the model replicas did not start within {ray_options.deploy_timeout_s:g} "
                     f"s (--deploy-timeout-s): {replicas} × {ray_options.replica_cpus:g} CPUs "
                     f"asked (--replica-cpus), the cluster has {total:g} ({free:g} free){said}",
                     "lower --replicas or --replica-cpus, add nodes, or raise "
                     "--deploy-timeout-s")


def _stop(name: str, started: bool) -> None:
    """Delete our application (its replicas answer what they hold, for at most
    --drain-timeout-s: Serve gives even a replica that was never placed that long), then shut
    Serve down if we started it and nothing else runs on it."""
    serve.delete(name)
    if started and not serve.status().applications:
        serve.shutdown()


def _serve_running() -> bool:
    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        return False
    return True


def _proxy_address(host: str, port: int) -> tuple[str, int]:
    """Where Serve's proxy listens: Serve started earlier on the cluster keeps its own
    address, which must then be the one asked for."""
    config = _get_global_client().http_config
    if (config.host, config.port) != (host, port):
        raise InputError(f"Ray Serve already runs on this cluster on {config.host}:"
                         f"{config.port}, not {host}:{port}",
                         f"pass --host {config.host} --port {config.port}, or stop it "
                         "with `serve shutdown`")
    return host, port


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__
