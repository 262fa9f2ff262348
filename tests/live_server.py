"""A live `bertonnx serve` for the server and reliability tests, and a raw HTTP/1.1 client
that can misbehave (stop half-way through a request, hang up, keep a connection idle).

`LiveServer(argv)` starts `python -m bertonnx.runtime.cli serve DIR --port 0 ...` (or any
argv that ends up there; `LiveServer.serve(DIR, *flags)` builds that argv) on 127.0.0.1,
waits for its announced address and /health (failing at once if it exits), and reads its
/metrics, RSS and open descriptors from /proc. `Raw(server)` is one socket: `send_head` / `send` /
`response()`; every read has a socket timeout, a guard against a hung test, never a figure.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

from bertonnx.runtime.server.metrics import Metrics
from bertonnx.runtime.server.process import announced_url

GUARD_S = 60.0   # no single wait in these tests may take longer: a hung server fails fast


def serve_argv(export_dir, *flags) -> list[str]:
    return [sys.executable, "-m", "bertonnx.runtime.cli", "serve", str(export_dir),
            "--port", "0", *map(str, flags)]


class LiveServer:
    """The server process; `url`, `host`, `port`; stderr kept in `log`."""

    @classmethod
    def serve(cls, export_dir, *flags, ready_timeout: float = 90.0) -> "LiveServer":
        return cls(serve_argv(export_dir, *flags), ready_timeout=ready_timeout)

    def __init__(self, argv: list[str], ready_timeout: float = 90.0):
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._announced = threading.Event()
        self.host = self.port = None
        threading.Thread(target=self._read_log, daemon=True).start()
        try:
            self._announced.wait(ready_timeout)
            assert self.port is not None, (
                f"no address announced (exit status {self.proc.poll()}):\n{self.log}")
            self.url = f"http://{self.host}:{self.port}"
            self.until(lambda: self._healthy(), "the server never became healthy",
                       timeout=ready_timeout)
        except BaseException:
            self.kill()
            raise

    def _read_log(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            url = announced_url(line)
            if url and not self._announced.is_set():
                host, port = url.removeprefix("http://").rsplit(":", 1)
                self.host, self.port = host, int(port)
                self._announced.set()
        self._announced.set()  # stderr closed: the process ended, nothing more will come

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, f"server exited {self.proc.returncode}:\n{self.log}"
        try:
            return httpx.get(self.url + "/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout: float = GUARD_S) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()

    # -- what the server says about itself ------------------------------------------------

    def metrics(self) -> dict[str, float]:
        return Metrics.parse(httpx.get(self.url + "/metrics", timeout=GUARD_S).text)

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def until(self, condition, what: str, timeout: float = GUARD_S) -> None:
        """Poll `condition()` until true (an event the test waits for, not a timing)."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"{what}:\n{self.log[-2000:]}"
            time.sleep(0.01)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def predict(self, inputs, **parameters) -> httpx.Response:
        return httpx.post(self.url + "/predict", json={"inputs": inputs, "parameters": parameters},
                          timeout=GUARD_S)


class Raw:
    """One TCP connection speaking HTTP/1.1 by hand."""

    def __init__(self, server: LiveServer, timeout: float = GUARD_S):
        self.host = server.host
        self.sock = socket.create_connection((server.host, server.port), timeout=timeout)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_head(self, path: str = "/predict", length: int | None = None,
                  method: str = "POST") -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
        if length is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {length}\r\n"
        self.send((head + "\r\n").encode())

    def post(self, payload, path: str = "/predict", upto: int | None = None) -> bytes:
        """Send a POST of `payload` (JSON), only its first `upto` body bytes if given;
        returns the whole body (the rest can follow with `send`)."""
        body = json.dumps(payload).encode()
        self.send_head(path, len(body))
        self.send(body[:upto])
        return body

    def get(self, path: str) -> tuple[int, dict, bytes]:
        self.send_head(path, method="GET")
        return self.response()

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def response(self) -> tuple[int, dict, bytes] | None:
        """(status, headers, body) of the next response, or None if the server closed the
        connection first."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                assert not self.buffer, f"connection closed mid-response: {self.buffer!r}"
                return None
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, v in
                   (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        length = int(headers.get("content-length", 0))
        while len(self.buffer) < length:
            assert self._fill(), "connection closed mid-body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    def closed_by_server(self) -> bool:
        """Blocks until the server sends more or closes; True when it closed. A reset is a
        close too: bytes a client sends after the server's close (a dripping client's next
        byte) are answered with RST, and the next recv raises instead of reading EOF."""
        if self.buffer:
            return False
        try:
            return not self._fill()
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
