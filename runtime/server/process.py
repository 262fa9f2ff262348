"""Running the app: check the TLS files and bind the socket first (a bad key file or a taken
port is one clear error), fit the descriptor limit to --max-connections, then uvicorn (with
connections.py's protocol; over TLS with --ssl-certfile/--ssl-keyfile, client certificates
required with --ssl-ca-certs) until SIGTERM/SIGINT, which drains every request already received
and exits 0 — or, when the drain outlasts --drain-timeout-s, answers the rest 503 and exits 1."""
from __future__ import annotations

import asyncio
import re
import resource
import signal
import socket
import ssl
from pathlib import Path
from typing import Sequence

import uvicorn

from ..core.defaults import resolve_export
from ..core.errors import ArtifactError, BertOnnxError, InputError
from ..core.foreign import read_manifest
from .app import create_app
from .connections import guarded_protocol
from .openai import EMBEDDINGS
from .registry import ModelSource
from .settings import ServeOptions

# Descriptors the process needs besides client connections: the listening socket, the model
# and tokenizer files while loading, onnxruntime's and Python's own, refused connections
# between accept and close.
FD_RESERVE = 64


class DrainCut(BertOnnxError):
    """SIGTERM's drain outlasted --drain-timeout-s: requests were answered 503."""

    exit_code = 1


def fit_descriptor_limit(max_connections: int) -> int:
    """Raise the soft RLIMIT_NOFILE to hold max_connections + FD_RESERVE (up to the hard
    limit); InputError when even the hard limit cannot. Returns the soft limit now."""
    need = max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    if hard == resource.RLIM_INFINITY or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return need
    raise InputError(f"--max-connections {max_connections} needs {need} file descriptors and "
                     f"this process may open at most {hard} (ulimit -Hn)",
                     f"pass --max-connections {max(1, hard - FD_RESERVE)} or less, or raise "
                     "the limit (ulimit -n)")


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


# The line `serve` writes once it listens; clients that start a server (tests, bench/serve_load,
# scripts) read its address from it with `announced_url`.
_ANNOUNCED = re.compile(r" on (https?://[\d.]+:\d+) ")


def served_routes(task: str, name: str) -> str:
    """The routes `serve` announces: those that answer the export's task (/v1/embeddings
    answers only an embedding or BGE-M3 export; on the others it refuses every request)."""
    embeddings = ["/v1/embeddings"] if task in EMBEDDINGS.tasks else []
    return (f"POST {', '.join(['/predict', *embeddings, f'/v2/models/{name}/infer'])}; "
            "GET /health, /metrics, /v1/models, /v2")


def announced_url(line: str) -> str | None:
    """The server's URL if `line` is serve's announcement (`--port 0` picks a free port)."""
    m = _ANNOUNCED.search(line)
    return m.group(1) if m else None


def run_server(model_dir: str | Path | Sequence[tuple[str, str | Path]],
               options: ServeOptions = ServeOptions(), *, log_level: str = "warning",
               announce=print) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status (0 after a clean drain; DrainCut
    when the drain timeout cut requests). `model_dir`: one export, or (name, folder) pairs."""
    several = not isinstance(model_dir, (str, Path))
    # `default`: the shipped export (core/defaults.py)
    folders = [(name, resolve_export(d)) for name, d in model_dir] if several else \
        [(None, resolve_export(model_dir))]
    # a wrong folder fails here, in one line
    manifests = [read_manifest(d, verify=False) for _, d in folders]
    access = options.access
    access.check_tls()
    fit_descriptor_limit(options.max_connections)
    sock = bind(options.host, options.port)
    failed = []

    def on_fatal():
        failed.append(True)
        server.should_exit = True

    app = create_app([ModelSource(name, d) for name, d in folders] if several
                     else folders[0][1], options, on_fatal=on_fatal)
    state = app.state.bertonnx
    timeouts = options.timeouts
    config = uvicorn.Config(
        app, log_level=log_level, access_log=False, lifespan="on", server_header=False,
        http=guarded_protocol(options.max_connections, timeouts.header_s, state.metrics),
        timeout_keep_alive=timeouts.keep_alive_s,
        # a backstop only: the app cuts what is left at drain_s and answers it 503; uvicorn
        # would cancel the rest (answering 500) this much later
        timeout_graceful_shutdown=int(timeouts.drain_s) + 5,
        ssl_certfile=access.ssl_certfile, ssl_keyfile=access.ssl_keyfile,
        ssl_ca_certs=access.ssl_ca_certs,
        ssl_cert_reqs=ssl.CERT_REQUIRED if access.ssl_ca_certs else ssl.CERT_NONE)
    server = _Server(config, state)
    host, port = sock.getsockname()[:2]
    scheme = "https" if access.tls else "http"
    keys = f", {len(access.api_keys)} API key(s) required" if access.api_keys else ""
    if several:
        for (name, d), manifest in zip(folders, manifests):
            announce(f"bertonnx: model {name} ({manifest.task}) from {d}: "
                     f"{served_routes(manifest.task, name)}")
        announce(f"bertonnx: serving {len(folders)} models on {scheme}://{host}:{port} — "
                 f"name one in `model` (GET /v1/models){keys}")
    else:
        manifest = manifests[0]
        announce(f"bertonnx: serving {folders[0][1]} ({manifest.task}) as {state.name} on "
                 f"{scheme}://{host}:{port} — {served_routes(manifest.task, state.name)}"
                 f"{keys}")
    # uvicorn drains on SIGTERM, then re-raises the signal so the default action would kill
    # the process with status 143; by then the drain is done, so ours just lets it return.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
    if failed:
        # load_error is the loader's own line, its fix included: named once
        raise ArtifactError(f"the server stopped: {state.load_error}")
    if state.cut:
        raise DrainCut(f"the drain took longer than --drain-timeout-s {timeouts.drain_s:g}: "
                       f"{state.cut} request(s) were answered 503",
                       "raise --drain-timeout-s, or stop sending traffic before SIGTERM")
    return 0


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when a signal starts the drain."""

    def __init__(self, config, state):
        super().__init__(config)
        self.app_state = state

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        # a signal handler runs between bytecodes: hand the work to the loop
        loop.call_soon_threadsafe(self.app_state.begin_drain)
