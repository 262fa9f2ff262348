"""Memory of several models in one `bertonnx serve` against one server per model (issue 42's
goal: one server of three models within 75% of three servers' RSS).

    python -m bertonnx.bench.serve_models_memory DIR DIR [DIR ...] [--providers cpu] [--json F]

Each server is started as users start it (`bertonnx serve DIR [DIR ...] --port 0`), every
model is asked once through /predict with its task's example input (so each session has run
and holds its arenas), and then the process's VmRSS is read from /proc. The one server of all
the DIRs runs first, then a server per DIR; each is stopped (SIGTERM) before the next phase.
"""
from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from bertonnx.runtime.core.manifest import Manifest
from bertonnx.runtime.core.tasks import task_record

from .serve_load import Server

TEXT = "a short text about paris, music and the cat on the mat"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def ask(url: str, export: Path, name: str | None) -> None:
    """One /predict of the export's task example (naming the model where several serve)."""
    inputs = task_record(Manifest.read(export, verify=False).task).example(TEXT, "[MASK]")
    body = {"inputs": [inputs] * 8, **({"model": name} if name else {})}
    request = urllib.request.Request(url + "/predict", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        if r.status != 200:
            raise RuntimeError(f"{export}: /predict answered {r.status}")


def measure(dirs: list[Path], providers: str) -> dict:
    names = [f"m{i}" for i in range(len(dirs))]
    flags = ["--providers", providers, *(a for n in names for a in ("--name", n))]
    server = Server(str(dirs[0]), [*map(str, dirs[1:]), *flags])
    try:
        for d, n in zip(dirs, names):
            ask(server.url, d, n)
        together = rss_mib(server.proc.pid)
    finally:
        server.stop()
    alone = {}
    for d in dirs:
        server = Server(str(d), ["--providers", providers])
        try:
            ask(server.url, d, None)
            alone[str(d)] = rss_mib(server.proc.pid)
        finally:
            server.stop()
    total = sum(alone.values())
    return {"providers": providers, "one_server_mib": round(together, 1),
            "separate_mib": {k: round(v, 1) for k, v in alone.items()},
            "separate_total_mib": round(total, 1), "ratio": round(together / total, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bertonnx.bench.serve_models_memory",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, help="export folders (two or more)")
    p.add_argument("--providers", default="cpu", help="the engine of every server")
    p.add_argument("--json", type=Path, default=None, help="also write the result here")
    a = p.parse_args(argv)
    if len(a.dirs) < 2:
        p.error("give two or more export folders")
    result = measure(a.dirs, a.providers)
    for d, v in result["separate_mib"].items():
        print(f"server of {d}: {v:.0f} MiB")
    print(f"{len(a.dirs)} servers: {result['separate_total_mib']:.0f} MiB; one server of all: "
          f"{result['one_server_mib']:.0f} MiB ({result['ratio']:.0%})")
    if a.json:
        a.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
