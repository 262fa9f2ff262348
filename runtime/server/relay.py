"""One HTTP exchange carried whole across a process boundary, and the ASGI app driven in process.

Ray Serve (ray_serve.py) runs the server's Starlette app inside each model replica, away from
the process that holds the client's connection. The ingress reads the request whole into an
`HttpRequest` (a picklable record), the replica plays it into the app with `exchange` and
returns the `HttpResponse` the app wrote. Every route the app has comes along unchanged, since
the record is the raw ASGI request, not a parsed /predict body. Every answer of the app is one
JSON (or text) body, so nothing is lost by buffering it.

`Lifespan` runs the app's startup and shutdown the way uvicorn does (ASGI lifespan protocol),
and waits for the model: a replica counts as ready only once the app answers, so a replacement
never answers 503 "still loading" to the requests Ray sends it.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ..core.errors import ArtifactError


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query_string: bytes
    headers: tuple[tuple[bytes, bytes], ...]   # lower-case names, as ASGI gives them
    body: bytes
    client: tuple[str, int] | None = None


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


async def exchange(app, request: HttpRequest) -> HttpResponse:
    """`request` played into the ASGI `app`; its whole response. The body is delivered in one
    message; after it the client "stays connected" until the caller is cancelled (then the
    app's own cancellation drops the request's queued work)."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": request.method, "scheme": "http",
             "path": request.path, "raw_path": request.path.encode("utf-8", "surrogateescape"),
             "query_string": request.query_string, "root_path": "",
             "headers": [tuple(h) for h in request.headers], "client": request.client,
             "server": None, "state": {}}
    delivered = False
    never = asyncio.Event()

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await never.wait()      # cancelled with the caller: no disconnect to report before
        return {"type": "http.disconnect"}

    status, headers, chunks = 500, (), []

    async def send(message):
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = tuple((bytes(k), bytes(v)) for k, v in message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return HttpResponse(status, headers, b"".join(chunks))


class Lifespan:
    """The app's ASGI lifespan, run by hand: `await startup()` returns once the model answers
    (ArtifactError if it cannot load); `await shutdown()` lets the app finish queued work."""

    def __init__(self, app):
        self.app = app
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._task: asyncio.Task | None = None

    async def _call(self, kind: str) -> None:
        await self._inbox.put({"type": f"lifespan.{kind}"})
        got = asyncio.ensure_future(self._outbox.get())
        done, _ = await asyncio.wait({got, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if got not in done:
            got.cancel()
            self._task.result()   # the app's own exception, if it raised one
            raise ArtifactError(f"the server app ended during lifespan {kind}")
        message = got.result()
        if message["type"] != f"lifespan.{kind}.complete":
            raise ArtifactError(f"the server app failed its lifespan {kind}: "
                                f"{message.get('message', '')}")

    async def startup(self) -> None:
        self._task = asyncio.ensure_future(self.app(
            {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}},
            self._inbox.get, self._outbox.put))
        await self._call("startup")
        state = self.app.state.bertonnx
        if state.loading is not None:
            await state.loading          # the model loads in the background: wait for it
        if not state.ready:
            # load_error is the loader's own line, its fix included
            raise ArtifactError(f"cannot load {state.model_dir}: {state.load_error}")

    async def shutdown(self) -> None:
        if self._task is not None and not self._task.done():
            await self._call("shutdown")
            await self._task
