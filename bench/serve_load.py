"""Throughput of `bertonnx serve`: the plain server against Ray Serve with 1 and 2 replicas,
under the same load from `hey` (a compiled load generator: a Python client on a small machine
would measure itself).

    python -m bertonnx.bench.serve_load DIR --ray HOST:PORT [--rounds 3] [--json out.json]

DIR is an export folder; HOST:PORT a running Ray cluster (`ray start --head`) on this machine.
Each round starts every configuration in turn (plain; plain with 2 workers; Ray × 1; Ray × 2;
each round from the next one), warms it up, runs
`hey` one client at a time and then with `--clients` at once, and stops it; the table is the
median over rounds of requests/s and latency percentiles. CPU budget is the same for each:
the plain server's onnxruntime takes the machine's cores, Ray × 1 reserves them all for its
replica, Ray × 2 gives each replica half.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from bertonnx.runtime.server.process import announced_url



def configurations(ray: str, cores: int) -> list[tuple[str, list[str]]]:
    """Each with the same CPU budget; the second one is what 2 replicas do, in one process."""
    half = max(1, cores // 2)
    return [("plain", ["--threads", str(cores)]),
            ("plain, 2 workers", ["--workers", "2", "--threads", str(half)]),
            ("ray, 1 replica", ["--ray", ray, "--replicas", "1", "--replica-cpus", str(cores)]),
            ("ray, 2 replicas", ["--ray", ray, "--replicas", "2", "--replica-cpus", str(half)])]


class Server:
    """`bertonnx serve DIR --port 0 ARGS` until /health answers 200; SIGTERM to stop."""

    def __init__(self, export: str, args: list[str], timeout: float = 180,
                 health: str = "/health"):
        cmd = [sys.executable, "-m", "bertonnx.runtime.cli", "serve", export, "--port", "0",
               *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True)
        self.lines: list[str] = []
        found = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                url = announced_url(line)
                if url and not found.is_set():
                    self.url = url
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout):
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.lines))
        self.wait_healthy(health, timeout, lambda: "".join(self.lines))

    def wait_healthy(self, health: str, timeout: float, log) -> None:
        """Until GET url+health answers 200; stopped, with `log()` in the error, if it never
        does within `timeout` or the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + health, timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.proc.args[0]} never became healthy:\n{log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def hey(url: str, body: str, n: int, clients: int, path: str = "/predict") -> dict:
    """One `hey` run: requests/s, latency percentiles (ms), status counts."""
    out = subprocess.run(["hey", "-n", str(n), "-c", str(clients), "-t", "60", "-m", "POST",
                          "-T", "application/json", "-d", body, url + path],
                         capture_output=True, text=True, check=True).stdout
    pct = {int(p): 1000 * float(s) for p, s in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    statuses = {int(c): int(k) for c, k in re.findall(r"\[(\d+)\]\s+(\d+) responses", out)}
    return {"req_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50_ms": pct.get(50), "p95_ms": pct.get(95), "p99_ms": pct.get(99),
            "statuses": statuses}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("--ray", required=True, help="HOST:PORT of a running Ray cluster")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=400, help="per concurrent phase")
    ap.add_argument("--sequential", type=int, default=100, help="requests one at a time")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--text", default="A man is playing a guitar on the stage tonight.")
    ap.add_argument("--json", default=None, help="write every run and the medians here")
    args = ap.parse_args(argv)
    body = json.dumps({"inputs": args.text})
    runs: dict[str, dict[str, list[dict]]] = {}
    loads: list[float] = []
    configs = configurations(args.ray, args.cores)
    for r in range(args.rounds):
        # each round starts with the next configuration: a load spike from other jobs on
        # the machine falls on a different one each time
        for name, flags in configs[r % len(configs):] + configs[:r % len(configs)]:
            loads.append(os.getloadavg()[0])
            server = Server(args.export, flags)
            try:
                hey(server.url, body, 50, 4)                       # warm-up, not counted
                phases = {"1 client": hey(server.url, body, args.sequential, 1),
                          f"{args.clients} clients": hey(server.url, body, args.requests,
                                                         args.clients)}
            finally:
                server.stop()
            for phase, figures in phases.items():
                runs.setdefault(name, {}).setdefault(phase, []).append(figures)
                print(f"round {r + 1} {name:16s} {phase:11s} {figures}", file=sys.stderr)
    rows = []
    for name, phases in runs.items():
        for phase, figures in phases.items():
            med = {k: round(statistics.median(f[k] for f in figures), 1)
                   for k in ("req_per_s", "p50_ms", "p95_ms", "p99_ms")}
            bad = sum(n for f in figures for s, n in f["statuses"].items() if s != 200)
            rows.append({"server": name, "load": phase, **med, "non_200": bad,
                         "rounds": [f["req_per_s"] for f in figures]})
    print(f"load average (1 min) before each run: {min(loads):.1f}-{max(loads):.1f}")
    print("| server | load | req/s (median) | p50 ms | p95 ms | p99 ms | non-200 | "
          "req/s by round |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['server']} | {row['load']} | {row['req_per_s']} | {row['p50_ms']} | "
              f"{row['p95_ms']} | {row['p99_ms']} | {row['non_200']} | "
              f"{', '.join(map(str, row['rounds']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "runs": runs, "loadavg": loads}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
