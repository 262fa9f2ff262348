"""Embedding servers under the same varied load: `bertonnx serve` against infinity.

    python -m bertonnx.bench.serve_peers DIR [DIR ...] [--bertonnx "FLAGS" ...]
        [--infinity PYTHON --infinity-run "FOLDER ARGS" ...]
        [--per-request 1,8] [--clients 16] [--seconds 20] [--rounds 5] [--json out.json]

Each DIR is a feature-extraction export (the fp32 and int8 exports of one model, say), served
with each `--bertonnx` FLAGS (default: none); with several, a row names its folder. PYTHON is
an interpreter with `infinity_emb` installed (a bench-only peer with pins of its own:
docs/benchmarks.md has its venv); each `--infinity-run`
serves FOLDER (a Hugging Face folder; for `--engine optimum` one holding its ONNX file) with
infinity's flags ARGS, e.g. "onnx-int8/ --engine optimum --pooling-method mean". infinity runs
in FOLDER with `--model-id .` (its optimum engine fails on an absolute path with optimum 2.x)
and an empty HF_HUB_CACHE of its own (it caches a graph per model id there). Both servers
answer OpenAI's embeddings route, which takes the same body on each.

The load comes from `wrk` (compiled, closed loop: `--clients` connections, each sending its
next request when the last is answered) with a Lua script that sends a different body each
request, cycling through prose sentences of 4–60 words from bench/inputs.py — `hey` sends one
fixed body, which a server answering from a length-sorted queue would find too easy. Every
round starts each server in turn (each round from the next one, so a spike from other work
falls on a different server each time), warms it up, runs each `--per-request` size for
`--seconds`, reads the server's peak RSS (VmHWM) and stops it. The table: texts/s, p50 and
p99 latency, medians over rounds with the rounds' spread. With `--reference FOLDER` (the
sentence-transformers folder both serve), each server's embeddings of the same sentences are
fetched once (first round, after the load) and compared with
`SentenceTransformer(FOLDER).encode(..., normalize_embeddings=True)`: mean and worst cosine.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.ports import free_ports

from .inputs import prose_sentences
from .machine import cores, cpu_model, instruction_sets
from .retrieval import cosines as row_cosines
from .serve_load import Server

MODEL = "bench"  # the model name in each body; each server is told to answer to it

# wrk's Lua: each thread cycles through the bodies from its own offset; `done` prints one JSON
# line (wrk's own report gives no p99 and rounds its figures).
WRK_SCRIPT = """
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local path = os.getenv("ROUTE")
local n = 0
local offset = 0
local threads = {}
function setup(thread)
  thread:set("offset", #threads * 7919)
  threads[#threads + 1] = thread
end
function init(args) offset = tonumber(wrk.thread:get("offset")) or 0 end
function request()
  n = n + 1
  return wrk.format("POST", path, {["Content-Type"] = "application/json"},
                    bodies[(offset + n) % #bodies + 1])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'RESULT {"requests": %d, "seconds": %.6f, "p50_ms": %.3f, "p99_ms": %.3f, ' ..
    '"non_2xx": %d, "socket_errors": %d}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3,
    latency:percentile(99) / 1e3, e.status, e.connect + e.read + e.write + e.timeout))
end
"""


@dataclass(frozen=True)
class Peer:
    name: str
    argv: list[str] | None      # None: `bertonnx serve export` with `flags`
    flags: list[str]
    route: str
    cwd: str = "."
    export: str = ""


class External(Server):
    """A peer's server on a port drawn here, run in `cwd`, healthy when `health` answers 200."""

    def __init__(self, argv: list[str], url: str, health: str, cwd: str,
                 timeout: float = 300):
        self.url, self.lines = url, []
        log = tempfile.TemporaryFile("w+")
        self.cache = tempfile.TemporaryDirectory(prefix="serve-peers-hf-")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True,
                                     cwd=cwd, env={**os.environ, "HF_HUB_OFFLINE": "1",
                                                   "TRANSFORMERS_OFFLINE": "1",
                                                   "DO_NOT_TRACK": "1",
                                                   "HF_HUB_CACHE": self.cache.name})
        self.wait_healthy(health, timeout, lambda: log.seek(0) or log.read()[-3000:])


def peak_rss_mb(pid: int) -> float:
    """VmHWM of the server process and its children (a peer may fork workers)."""
    pids = [pid] + [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def bodies(per_request: int, count: int = 512) -> list[str]:
    texts = prose_sentences(count)
    return [json.dumps({"model": MODEL, "input": texts[i:i + per_request]})
            for i in range(0, count - per_request + 1, per_request)]


def embeddings(url: str, route: str, texts: list[str], per_request: int = 8) -> np.ndarray:
    """The server's embeddings of `texts`, in order."""
    out = []
    for i in range(0, len(texts), per_request):
        body = json.dumps({"model": MODEL, "input": texts[i:i + per_request]}).encode()
        req = urllib.request.Request(url + route, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            data = sorted(json.load(r)["data"], key=lambda d: d["index"])
        out += [d["embedding"] for d in data]
    return np.asarray(out, dtype=np.float64)


def reference_embeddings(folder: str, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer  # bench-only reference (torch)

    return SentenceTransformer(folder, device="cpu").encode(
        texts, normalize_embeddings=True, convert_to_numpy=True).astype(np.float64)


def cosines(got: np.ndarray, want: np.ndarray) -> dict:
    cos = row_cosines(got, want)
    return {"cosine_mean": round(float(cos.mean()), 4), "cosine_worst": round(float(cos.min()), 4)}


def wrk(url: str, route: str, body_file: Path, clients: int, seconds: int) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT)
    try:
        out = subprocess.run(["wrk", "-t", "1", "-c", str(clients), "-d", f"{int(seconds)}s",
                              "--timeout", "60s", "-s", f.name, url],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "BODIES": str(body_file), "ROUTE": route})
    finally:
        os.unlink(f.name)
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def start(peer: Peer) -> Server:
    if peer.argv is None:
        return Server(peer.export, peer.flags)
    (port,) = free_ports("127.0.0.1", 1)
    argv = [a.replace("{port}", str(port)) for a in peer.argv]
    return External(argv, f"http://127.0.0.1:{port}", "/health", peer.cwd)


def peers_from(args) -> list[Peer]:
    named = len(args.exports) > 1
    found = [Peer("bertonnx serve " + (f"{Path(export).name} " if named else "")
                  + (flags or "(defaults)"), None, ["--name", MODEL, *shlex.split(flags)],
                  "/v1/embeddings", export=export)
             for export in args.exports for flags in args.bertonnx or [""]]
    for run in args.infinity_run or []:
        folder, *flags = shlex.split(run)
        found.append(Peer(
            f"infinity {run}",
            [args.infinity, "-m", "infinity_emb.cli", "v2", "--model-id", ".",
             "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", "{port}",
             "--url-prefix", "/v1", *flags],
            [], "/v1/embeddings", cwd=folder))
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("exports", nargs="+", metavar="DIR")
    ap.add_argument("--bertonnx", action="append",
                    help="flags for one bertonnx serve configuration (repeat; default: none)")
    ap.add_argument("--infinity", help="a Python with infinity_emb installed")
    ap.add_argument("--infinity-run", action="append",
                    help='"FOLDER infinity-flags" for one infinity configuration (repeat)')
    ap.add_argument("--per-request", default="1,8")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reference", help="the sentence-transformers folder served: accuracy "
                    "of each server against it")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    names = [Path(d).name for d in args.exports]
    if len(set(names)) < len(names):
        ap.error(f"the exports' folder names each name a row, and repeat: {', '.join(names)}")
    if args.infinity_run and not args.infinity:
        ap.error("--infinity-run needs --infinity PYTHON (an interpreter with infinity_emb)")
    sizes = [int(s) for s in args.per_request.split(",")]
    peers = peers_from(args)
    scratch = tempfile.TemporaryDirectory(prefix="serve-peers-")  # the bodies, removed at exit
    work = Path(scratch.name)
    files = {}
    for size in sizes:
        files[size] = work / f"bodies-{size}.jsonl"
        files[size].write_text("\n".join(bodies(size)) + "\n")
    cpu = f"{cpu_model()}, {cores()} cores, {' '.join(instruction_sets())}"
    print(cpu, file=sys.stderr)
    runs: dict[tuple[str, int], list[dict]] = {}
    accuracy: dict[str, dict] = {}
    texts = prose_sentences(512)
    want = reference_embeddings(args.reference, texts) if args.reference else None
    for r in range(args.rounds):
        for peer in peers[r % len(peers):] + peers[:r % len(peers)]:
            server = start(peer)
            try:
                wrk(server.url, peer.route, files[sizes[0]], 4, 3)   # warm-up, not counted
                for size in sizes:
                    figures = wrk(server.url, peer.route, files[size], args.clients,
                                  args.seconds)
                    figures["texts_per_s"] = figures["requests"] * size / figures["seconds"]
                    figures["peak_rss_mb"] = peak_rss_mb(server.proc.pid)
                    figures["loadavg"] = os.getloadavg()[0]
                    runs.setdefault((peer.name, size), []).append(figures)
                    print(f"round {r + 1} {peer.name} ×{size}: {figures}", file=sys.stderr)
                if want is not None and peer.name not in accuracy:
                    accuracy[peer.name] = cosines(
                        embeddings(server.url, peer.route, texts), want)
                    print(f"{peer.name}: {accuracy[peer.name]}", file=sys.stderr)
            finally:
                server.stop()
    rows = []
    for (name, size), figures in runs.items():
        def med(key):
            return round(statistics.median(f[key] for f in figures), 1)
        rate = [f["texts_per_s"] for f in figures]
        rows.append({"server": name, "texts_per_request": size, "texts_per_s": med("texts_per_s"),
                     "min": round(min(rate), 1), "max": round(max(rate), 1),
                     "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"),
                     "peak_rss_mb": max(f["peak_rss_mb"] for f in figures),
                     "errors": sum(f["non_2xx"] + f["socket_errors"] for f in figures),
                     **accuracy.get(name, {})})
    print(f"{cpu}; {args.clients} clients, {args.seconds:g} s a run, {args.rounds} rounds")
    print("| server | texts/request | texts/s (median) | min–max | p50 ms | p99 ms | "
          "peak RSS MB | errors | cosine to sentence-transformers: mean / worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in sorted(rows, key=lambda x: (x["texts_per_request"], -x["texts_per_s"])):
        acc = (f"{row['cosine_mean']} / {row['cosine_worst']}" if "cosine_mean" in row
               else "not measured")
        print(f"| {row['server']} | {row['texts_per_request']} | {row['texts_per_s']} | "
              f"{row['min']}–{row['max']} | {row['p50_ms']} | {row['p99_ms']} | "
              f"{row['peak_rss_mb']} | {row['errors']} | {acc} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"cpu": cpu, "args": vars(args), "rows": rows,
             "runs": {f"{k[0]} ×{k[1]}": v for k, v in runs.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
