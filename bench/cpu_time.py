"""CPU seconds per forward of ONNX graphs on one thread: a figure other processes barely move.

    python -m bertonnx.bench.cpu_time --batch 32 --seq 128 A.onnx B.onnx ...

On a shared 2-core machine wall-clock throughput swings with the neighbours; with one
intra-op thread onnxruntime runs the graph in the calling thread, so that thread's CPU time
(time.thread_time) is the graph's cost alone. Graphs are interleaved round-robin on the same
random feed; medians are reported, with matmul GFLOP/s per core against one core's fp32 peak
(32 FLOP/cycle × clock). Used for graph- and kernel-level choices (int8 weight type,
fusion); wall-clock, multi-thread figures come from `python -m bertonnx.bench.compare`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from bertonnx.runtime.session import create_session

from .inputs import random_feeds
from .machine import FLOP_PER_CYCLE, cpu_clock_ghz
from .timing import encoder_flops, round_robin


def cpu_times(graphs: list[Path], *, batch: int = 32, seq: int = 128, repeats: int = 5,
              config: Path | None = None) -> dict:
    """One row per graph (the same graph may be given twice, to see the noise): median CPU ms
    of a forward on one thread and its matmul GFLOP/s, with one core's fp32 peak."""
    cfg = json.loads(Path(config or Path(graphs[0]).parent / "config.json").read_text())
    # one thread: the graph runs in this thread, so thread_time sees all of it
    sessions = [create_session(g, threads=1) for g in graphs]
    feeds = random_feeds(batch, seq, int(cfg["vocab_size"]))
    cpu = round_robin({str(i): (lambda s=s: s.run(feeds)) for i, s in enumerate(sessions)},
                      repeats, 1, clock=time.thread_time, settle=0)
    flops = encoder_flops(cfg, batch, seq)
    rows = []
    for g, t in zip(graphs, cpu.values()):
        ms = float(np.median(t)) * 1000
        rows.append({"graph": str(g), "ms": ms, "gflops": flops / (ms / 1000) / 1e9})
    return {"batch": batch, "seq": seq, "repeats": repeats, "rows": rows,
            "core_peak_gflops": FLOP_PER_CYCLE * cpu_clock_ghz()}


def format_cpu_times(r: dict) -> str:
    peak = r["core_peak_gflops"]
    lines = [f"b={r['batch']} s={r['seq']}, 1 thread, CPU ms per forward (median of "
             f"{r['repeats']}), one core's fp32 peak {peak:.1f} GFLOP/s"]
    first = r["rows"][0]["ms"]
    for row in r["rows"]:
        ms, gf = row["ms"], row["gflops"]
        lines.append(f"  {row['graph']:<58} {ms:9.1f} ms {gf:7.1f} GFLOP/s "
                     f"{100 * gf / peak:6.1f}%  ×{first / ms:5.2f} vs first")
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m bertonnx.bench.cpu_time`: its flags live in commands.py
    from .commands import cpu_time_command

    cpu_time_command.main(prog_name="python -m bertonnx.bench.cpu_time")
