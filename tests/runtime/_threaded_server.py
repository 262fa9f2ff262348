"""The server app on uvicorn in a thread of the test process, on a free loopback port: a real
HTTP server for client libraries, serving a pipeline the session already loaded (`ours`), so
a test can reach several tasks without starting a process and loading a model for each.
tests/live_server.py's LiveServer runs `bertonnx serve` itself; this one skips only the CLI."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from bertonnx.runtime.server import ServeOptions, bind, create_app


@contextmanager
def threaded_server(pipeline, name: str, options: ServeOptions | None = None,
                    timeout: float = 30.0):
    """Yields the base URL of a server answering with `pipeline` as model `name` (or, with
    `pipeline` a dict name -> pipeline, with several models); stops it (and joins its thread)
    on exit."""
    import uvicorn

    from bertonnx.runtime.server.registry import ModelSource

    options = options or ServeOptions(name=name)
    if isinstance(pipeline, dict):
        app = create_app([ModelSource(n, Path(f"/nonexistent/{n}"), lambda p=p: p)
                          for n, p in pipeline.items()], options)
    else:
        app = create_app(f"/nonexistent/{name}", options, loader=lambda: pipeline)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = "http://127.0.0.1:%d" % sock.getsockname()[1]
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and thread.is_alive(), "server never got ready"
            time.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()
        assert not thread.is_alive(), "server thread did not stop"
