"""The figures of README's "Server limits" section, measured against a live `bertonnx serve`.

    python scripts/server_limits_figures.py all          # or: memory | fairness | connections
    python scripts/server_limits_figures.py memory --variants 1000 --unbounded 150

- memory: all-MiniLM-L6-v2 exported for question-answering (random span head: the numbers
  do not matter, the tokenizer does — 30,522 WordPiece tokens, ~6 MB per tokenizer copy);
  the server's RSS (/proc) before and after N requests, each with its own (max_seq_len,
  doc_stride); then the same on a server whose tokenizer-copy cache is unbounded (how it was
  before issue 17), for fewer requests.
- fairness: `serve default` (the shipped fill-mask, MiniLM-sized int8); a 1-text request's
  latency alone, and sent while a maximal request (256 texts, ~32k tokens) runs, at the
  default --max-batch-size and a smaller one.
- connections: `serve default` with default flags; 1,100 stalled clients (silent, half a
  request line, half a body): open connections and descriptors before, while stalled, after
  --header-timeout-s, after --body-timeout-s; refusals past --max-connections.

Not a test: it prints what it measured (a markdown table per part, then JSON) and asserts
nothing. Needs the full install (torch to export MiniLM) and the serve extra.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bertonnx.runtime.server.metrics import Metrics
from bertonnx.runtime.server.process import announced_url

_UNBOUNDED = ("import sys; from bertonnx.runtime.core.pipelines import base; "
              "base.BACKEND_CACHE = 10**9; from bertonnx.runtime.cli import main; "
              "sys.exit(main(sys.argv[1:]))")


class Server:
    def __init__(self, export, *flags, unbounded: bool = False):
        head = ["-c", _UNBOUNDED] if unbounded else ["-m", "bertonnx.runtime.cli"]
        self.proc = subprocess.Popen([sys.executable, *head, "serve", str(export), "--port", "0",
                                      *map(str, flags)],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        for line in self.proc.stderr:
            self.url = announced_url(line)
            if self.url:
                break
        else:
            raise SystemExit(f"the server did not start (exit {self.proc.wait()})")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        for _ in range(6000):
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        raise SystemExit("the server never became healthy")

    def predict(self, inputs, **parameters):
        r = httpx.post(self.url + "/predict", json={"inputs": inputs, "parameters": parameters},
                       timeout=600)
        assert r.status_code == 200, r.text
        return r.json()

    def metrics(self) -> dict[str, float]:
        return Metrics.parse(httpx.get(self.url + "/metrics", timeout=60).text)

    def status(self, key: str) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) / 1024

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(120)


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    flags = next(ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo")
                 if ln.startswith("flags"))
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
    return {"cpu": cpu, "cores": os.cpu_count(), "flags": [f for f in wanted if f in flags],
            "load_average": os.getloadavg()}


# -- memory over parameter variants ----------------------------------------------------------

CONTEXT = ("The river runs through the old city, past the market and the school, and on to "
           "the sea. Every morning the fishermen take their boats out before the light, and "
           "by noon the market is full of people buying fish, bread and fruit. ") * 6


def qa_export(folder: Path) -> Path:
    from bertonnx.build import default_model_dir
    from bertonnx.export import ExportOptions, export_model

    out = folder / "minilm-qa"
    if not (out / "bertonnx.json").exists():
        export_model(default_model_dir(), "question-answering", out,  # a random head: timing only
                     ExportOptions(parity=False, allow_untrained_head=True))
    return out


def memory(folder: Path, variants: int, unbounded: int) -> dict:
    export = qa_export(folder)
    pairs = [(seq, stride) for seq in range(64, 513) for stride in (8, 24, 40)]
    question = "where do the fishermen go in the morning ?"
    result = {}
    for name, n, flag in (("bounded (LRU of 8)", variants, False),
                          ("unbounded (before issue 17)", unbounded, True)):
        if n == 0:
            continue
        server = Server(export, unbounded=flag)
        try:
            server.predict({"question": question, "context": CONTEXT})
            before, steps, t0 = server.status("VmRSS"), [], time.perf_counter()
            for i, (seq, stride) in enumerate(pairs[:n], 1):
                server.predict({"question": question, "context": CONTEXT},
                               max_seq_len=seq, doc_stride=stride)
                if i % max(1, n // 10) == 0:
                    steps.append((i, round(server.status("VmRSS"))))
            result[name] = {"requests": n, "rss_before_mb": round(before),
                            "rss_after_mb": round(server.status("VmRSS")),
                            "rss_peak_mb": round(server.status("VmHWM")), "steps": steps,
                            "seconds": round(time.perf_counter() - t0, 1)}
        finally:
            server.stop()
    return result


# -- a small request beside a maximal one ----------------------------------------------------

WORDS = ("the cat sat on the mat and the dog ran to the river in the city with music "
         "and film while the team played a game at school near the house").split()


def maximal_texts(n: int = 256, words: int = 124) -> list[str]:
    texts = []
    for i in range(n):
        ws = [WORDS[(i + j) % len(WORDS)] for j in range(words)]
        ws[words // 2] = "[MASK]"
        texts.append(" ".join(ws) + " .")
    return texts


def fairness(batch_sizes=(32, 8), rounds: int = 3) -> dict:
    big, small = maximal_texts(), "the [MASK] sat on the mat ."
    result = {}
    for size in batch_sizes:
        server = Server("default", "--max-batch-size", size)
        try:
            server.predict(small)
            alone = []
            for _ in range(10):
                t = time.perf_counter()
                server.predict(small)
                alone.append(time.perf_counter() - t)
            big_answer = server.predict(big, top_k=3)   # warm, and checked whole
            assert len(big_answer) == len(big)
            beside, big_s, parts = [], [], []
            for _ in range(rounds):
                calls0 = server.metrics()["bertonnx_batch_requests_count"]
                done: dict = {}

                def run_big():
                    t = time.perf_counter()
                    server.predict(big, top_k=3)   # 256 masks x 3: within --max-answers
                    done["s"] = time.perf_counter() - t

                thread = threading.Thread(target=run_big)
                thread.start()
                while server.metrics()["bertonnx_batch_requests_count"] == calls0:
                    if not thread.is_alive():
                        raise SystemExit("the maximal request failed")
                    time.sleep(0.01)    # until the maximal request's first part has run
                t = time.perf_counter()
                server.predict(small)
                beside.append(time.perf_counter() - t)
                thread.join()
                big_s.append(done["s"])
                m = server.metrics()
                parts.append(m["bertonnx_batch_requests_count"] - calls0 - 1)
            m = server.metrics()
            result[f"--max-batch-size {size}"] = {
                "small_alone_ms": round(1000 * statistics.median(alone), 1),
                "small_beside_maximal_ms": round(1000 * statistics.median(beside), 1),
                "small_beside_maximal_max_ms": round(1000 * max(beside), 1),
                "maximal_request_s": round(statistics.median(big_s), 2),
                "parts_of_the_maximal_request": int(statistics.median(parts)),
                "mean_call_ms": round(1000 * m["bertonnx_batch_duration_seconds_sum"]
                                      / m["bertonnx_batch_duration_seconds_count"], 1)}
        finally:
            server.stop()
    return result


# -- stalled clients -------------------------------------------------------------------------


def connections(n: int = 1100) -> dict:
    """Past --max-connections (1,000) /metrics itself is refused, so the connections are
    counted as the server's open descriptors (/proc) throughout, and by its gauge where
    /metrics answers."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 256)), hard))
    server = Server("default")
    try:
        idle = {"open_connections": server.metrics()["bertonnx_open_connections"] - 1,
                "fds": server.fds()}
        body = json.dumps({"inputs": "the [MASK] sat ."}).encode()
        socks = []
        for i in range(n):
            s = socket.create_connection((server.host, server.port), timeout=120)
            kind = i % 11
            try:
                if kind in (7, 8):      # half a request line
                    s.sendall(b"POST /pred")
                elif kind in (9, 10):   # headers and half a body
                    s.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                              % (len(body), body[:5]))
            except OSError:
                pass                    # refused at connect: the server has closed it
            socks.append(s)
        last = time.monotonic()
        time.sleep(1)
        stalled = {"fds": server.fds()}
        time.sleep(max(0.0, last + 10 + 2 - time.monotonic()))
        m = server.metrics()
        after_header = {"open_connections": m["bertonnx_open_connections"] - 1,
                        "fds": server.fds(),
                        "refused_503": m.get("bertonnx_connections_refused_total", 0)}
        time.sleep(max(0.0, last + 30 + 2 - time.monotonic()))
        m = server.metrics()
        after_body = {"open_connections": m["bertonnx_open_connections"] - 1, "fds": server.fds(),
                      "timeouts": {k: v for k, v in m.items() if "timeouts_total" in k}}
        answers: dict[str, int] = {}
        for s in socks:
            try:
                head = s.recv(64).split(b"\r\n", 1)[0].decode()
            except OSError as e:
                head = type(e).__name__
            answers[head or "closed"] = answers.get(head or "closed", 0) + 1
            s.close()
        return {"clients": n, "idle": idle, "while_stalled": stalled,
                "after_header_timeout_10s": after_header, "after_body_timeout_30s": after_body,
                "what_the_clients_got": answers}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["all", "memory", "fairness", "connections"])
    ap.add_argument("--variants", type=int, default=1000)
    ap.add_argument("--unbounded", type=int, default=150,
                    help="requests for the unbounded-cache contrast (0: skip it)")
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "bertonnx-figures")
    args = ap.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    out = {"machine": machine()}
    if args.part in ("all", "memory"):
        out["memory"] = memory(args.folder, args.variants, args.unbounded)
    if args.part in ("all", "fairness"):
        out["fairness"] = fairness()
    if args.part in ("all", "connections"):
        out["connections"] = connections()
    out["machine"]["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
