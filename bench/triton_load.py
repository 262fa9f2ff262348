"""What Triton costs and buys: the same load against `bertonnx serve` and against
`bertonnx serve --engine triton` (the bundled tritonserver running the export's pipeline model in
its Python backend), both spoken to over the same Open Inference Protocol route.

    python -m bertonnx.bench.triton_load DIR [--rounds 5] [--json out.json]

DIR is an export folder; the triton extra must be installed (`pip install 'bertonnx[triton]'`)
and `hey` on PATH (Debian: apt-get install hey). Every request is the same v2 body
`POST /v2/models/bench/infer` with a BYTES `text` tensor of 1 or 8 texts, so both servers parse,
batch and answer the same thing. Each round starts every configuration in turn (each round from
the next one, so a load spike from other jobs falls on a different one), warms it up, runs `hey`
with --clients at once for each body, reads the memory of the whole process tree (the CLI,
tritonserver and its stubs, or the server and its workers), and stops it. The table is the
median over rounds. Every configuration gets the machine's cores: one onnxruntime session with
all of them, or two (workers, Triton instances) with half each.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from .serve_load import Server, hey

NAME = "bench"  # the model's name on both servers: the same /v2 path
TEXTS = ("A man is playing a guitar on the stage tonight.",
         "The quarterly report shows revenue grew while costs stayed flat.",
         "Where is the nearest train station?",
         "She left the keys on the kitchen table before the meeting started this morning.",
         "Cats sleep most of the day.",
         "Heavy rain is expected across the northern region through the weekend, with "
         "flooding possible near rivers.",
         "I would like a cup of coffee.",
         "The museum opens at nine and closes at five on weekdays.")


def configurations(cores: int) -> list[tuple[str, list[str]]]:
    half = max(1, cores // 2)
    return [("bertonnx serve", ["--threads", str(cores)]),
            ("bertonnx serve, 2 workers", ["--workers", "2", "--threads", str(half)]),
            ("triton, 1 instance", ["--engine", "triton", "--threads", str(cores)]),
            ("triton, 2 instances", ["--engine", "triton", "--instances", "2",
                                     "--threads", str(half)])]


def body(texts: tuple[str, ...], triton: bool) -> str:
    """The v2 request: bertonnx's /v2 takes the texts as shape [N], Triton's inference API as
    [N, 1] (the pipeline model's config declares dims [1] with a batch axis)."""
    shape = [len(texts), 1] if triton else [len(texts)]
    return json.dumps({"inputs": [{"name": "text", "shape": shape, "datatype": "BYTES",
                                   "data": list(texts)}]})


def tree_memory(pid: int) -> dict[str, float]:
    """RSS and PSS (MB) summed over `pid` and its descendants. PSS shares each shared page
    among the processes that map it, so its sum is what the tree costs the machine; the RSS
    sum counts shared pages (the stubs' common libraries) once per process."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, seen, rss, pss = [pid], [], 0, 0
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children.get(p, []))
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                key, _, value = line.partition(":")
                if key in ("Rss", "Pss"):
                    kb = int(value.split()[0])
                    rss, pss = (rss + kb, pss) if key == "Rss" else (rss, pss + kb)
        except OSError:
            continue
    return {"rss_mb": round(rss / 1024, 1), "pss_mb": round(pss / 1024, 1),
            "processes": len(seen)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=400, help="per load")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--triton-python", default=None,
                    help="the Python Triton's stub runs the model in (one with numpy < 2)")
    ap.add_argument("--json", default=None, help="write every run and the medians here")
    args = ap.parse_args(argv)
    stub = ["--triton-python", args.triton_python] if args.triton_python else []
    path = f"/v2/models/{NAME}/infer"
    runs: dict[str, dict[str, list[dict]]] = {}
    memory: dict[str, list[dict]] = {}
    loadavg: list[float] = []
    configs = configurations(args.cores)
    for r in range(args.rounds):
        for name, flags in configs[r % len(configs):] + configs[:r % len(configs)]:
            loadavg.append(os.getloadavg()[0])
            triton = "triton" in flags
            extra = stub if triton else []
            loads = {"1 text": body(TEXTS[:1], triton), "8 texts": body(TEXTS, triton)}
            server = Server(args.export, [*flags, *extra, "--name", NAME],
                            health="/v2/health/ready")
            try:
                hey(server.url, loads["8 texts"], 50, 4, path)          # warm-up, not counted
                for load, payload in loads.items():
                    figures = hey(server.url, payload, args.requests, args.clients, path)
                    runs.setdefault(name, {}).setdefault(load, []).append(figures)
                    print(f"round {r + 1} {name:26s} {load:8s} {figures}", file=sys.stderr)
                memory.setdefault(name, []).append(tree_memory(server.proc.pid))
            finally:
                server.stop()
    rows = []
    for name, phases in runs.items():
        mem = {k: statistics.median(m[k] for m in memory[name]) for k in ("rss_mb", "pss_mb")}
        for load, figures in phases.items():
            med = {k: round(statistics.median(f[k] for f in figures), 1)
                   for k in ("req_per_s", "p50_ms", "p99_ms") if None not in (f[k] for f in figures)}
            bad = sum(n for f in figures for s, n in f["statuses"].items() if s != 200)
            texts_per_s = round(med["req_per_s"] * (1 if load == "1 text" else len(TEXTS)), 1)
            rows.append({"server": name, "load": load, **med, "texts_per_s": texts_per_s,
                         **mem, "non_200": bad, "rounds": [f["req_per_s"] for f in figures]})
    print(f"load average (1 min) before each run: {min(loadavg):.1f}-{max(loadavg):.1f}")
    print(f"| server | {args.clients} clients, texts/request | req/s (median) | texts/s | "
          "p50 ms | p99 ms | RSS MB (tree) | PSS MB (tree) | non-200 | req/s by round |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['server']} | {row['load']} | {row['req_per_s']} | {row['texts_per_s']} | "
              f"{row['p50_ms']} | {row.get('p99_ms')} | {row['rss_mb']} | {row['pss_mb']} | "
              f"{row['non_200']} | {', '.join(map(str, row['rounds']))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows, "runs": runs, "memory": memory,
                       "loadavg": loadavg}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
