"""Connection-level limits uvicorn's h11 protocol lacks, as a subclass of it.

uvicorn closes a keep-alive connection idle past `timeout_keep_alive`, but a connection that
sends nothing, or half a request line, or headers a byte at a time, stays open for ever; and
`limit_concurrency` answers 503 only once a request has arrived, so silent connections pile up
until the process runs out of file descriptors (then asyncio logs "Too many open files" on
every accept and good requests time out). Here:

- header deadline: from the connection's start, or the first byte of each later request, the
  headers must be complete within `header_s`, or the client gets a 408 and the connection
  closes (counted in bertonnx_timeouts_total{stage="header"});
- connection cap: past `max_connections` open connections, a new one is answered 503 with
  Retry-After and closed at once (bertonnx_connections_refused_total), well before the
  descriptor limit (process.py raises that limit to fit the cap, or refuses to start).
"""
from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .metrics import Metrics
from .protocol import error_body


def _raw(status: int, reason: str, message: str, kind: str, extra: str = "") -> bytes:
    """A whole HTTP/1.1 response written straight to the socket (h11 cannot answer before a
    request has arrived), closing the connection."""
    body = error_body(message, kind)
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n")
    return head.encode("ascii") + body


def guarded_protocol(max_connections: int, header_s: float, metrics: Metrics) -> type:
    """uvicorn's H11Protocol with the header deadline and the connection cap (uvicorn builds
    the protocol itself, so the settings are bound into the class)."""
    refusal = _raw(503, "Service Unavailable",
                   f"the server has {max_connections} connections open (--max-connections); "
                   "retry shortly", "Overloaded", "retry-after: 1\r\n")
    too_slow = _raw(408, "Request Timeout",
                    f"the request's headers did not arrive within {header_s:g} s "
                    "(--header-timeout-s)", "Timeout")

    class GuardedH11Protocol(H11Protocol):
        _refused = False
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            if len(self.connections) >= max_connections:
                self._refused = True
                metrics.connection_refused()
                transport.write(refusal)
                transport.close()
                return
            metrics.open_connections += 1
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc) -> None:
            if self._refused:
                return
            metrics.open_connections -= 1
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                # bytes of a request whose headers are not complete: its deadline runs from
                # the first of them (a kept-alive connection idles under uvicorn's timer)
                if self._header_timer is None and not self.transport.is_closing():
                    self._arm()
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            self._disarm()
            super().on_response_complete()

        def _arm(self) -> None:
            self._header_timer = self.loop.call_later(header_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            metrics.timed_out("header")
            self.transport.write(too_slow)
            self.transport.close()

    return GuardedH11Protocol
