"""Running the app: bind the socket first (a taken port is one clear error), then uvicorn until
SIGTERM/SIGINT, which drains every request already received and exits 0."""
from __future__ import annotations

import signal
import socket
from pathlib import Path

from ..defaults import resolve_export
from ..errors import ArtifactError, InputError
from ..foreign import read_manifest
from .app import create_app
from .settings import ServeOptions


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
    manifest = read_manifest(model_dir, verify=False)  # a wrong folder fails here, in one line
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


