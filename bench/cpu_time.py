"""CPU seconds per forward of ONNX graphs on one thread: a figure other processes barely move.

    python -m bertonnx.bench.cpu_time --batch 32 --seq 128 A.onnx B.onnx ...

On a shared 2-core machine wall-clock throughput swings with the neighbours; with one
intra-op thread onnxruntime runs the graph in the calling thread, so that thread's CPU time
(time.thread_time) is the graph's cost alone. Graphs are interleaved round-robin on the same
random feed; medians are reported, with matmul GFLOP/s per core against one core's peak for
the graph's precision (machine.peak_model: fp32 FLOP/cycle or int8 op/cycle × clock). Used for graph- and kernel-level choices (int8 weight type,
fusion); wall-clock, multi-thread figures come from `python -m bertonnx.bench.compare`.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.session import create_session

from .inputs import random_feeds
from .machine import cpu_clock_ghz, cpu_peak_model, percent_of_peak
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
    pm, ghz = cpu_peak_model(), cpu_clock_ghz()
    peaks = {"fp32": pm.fp32_flop_per_cycle * ghz,
             "int8": pm.int8_op_per_cycle * ghz if pm.int8_op_per_cycle else None}
    rows = []
    for g, t in zip(graphs, cpu.values()):
        ms = float(np.median(t)) * 1000
        gf = flops / (ms / 1000) / 1e9
        precision = graph_precision(Path(g))
        pct, note = percent_of_peak(gf, peaks.get(precision))
        rows.append({"graph": str(g), "ms": ms, "gflops": gf, "precision": precision,
                     "pct_core_peak": pct, "peak_note": note})
    return {"batch": batch, "seq": seq, "repeats": repeats, "rows": rows,
            "core_peak_gflops": peaks["fp32"], "core_int8_peak_gops": peaks["int8"],
            "peak_model": {"fp32": pm.fp32_basis, "int8": pm.int8_basis}}


def op_profile(graph: Path, *, batch: int = 32, seq: int = 128, runs: int = 5,
               config: Path | None = None) -> dict:
    """Where one thread's forward goes, per op type: onnxruntime's profiler, each op type's
    time summed within a run, the median over `runs` (after one warm-up run), in ms."""
    cfg = json.loads(Path(config or Path(graph).parent / "config.json").read_text())
    feeds = random_feeds(batch, seq, int(cfg["vocab_size"]))
    with tempfile.TemporaryDirectory(prefix="bertonnx-profile-") as d:
        sess = create_session(graph, threads=1, profile_prefix=str(Path(d) / "p"))
        for _ in range(runs + 1):
            sess.run(feeds)
        events = json.loads(Path(sess.inner.end_profiling()).read_text())
    model_runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                        if e.get("cat") == "Session" and e.get("name") == "model_run")[1:]
    per_run: list[dict[str, float]] = [{} for _ in model_runs]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        for i, (start, end) in enumerate(model_runs):
            if start <= e["ts"] <= end:
                op = e["args"]["op_name"]
                per_run[i][op] = per_run[i].get(op, 0.0) + e["dur"] / 1000
    ops = sorted({op for r in per_run for op in r})
    ms = {op: float(np.median([r.get(op, 0.0) for r in per_run])) for op in ops}
    total = float(np.median([end - start for start, end in model_runs])) / 1000
    return {"graph": str(graph), "batch": batch, "seq": seq, "runs": len(model_runs),
            "total_ms": total, "ops_ms": dict(sorted(ms.items(), key=lambda kv: -kv[1]))}


def format_op_profile(p: dict) -> str:
    lines = [f"{p['graph']}: b={p['batch']} s={p['seq']}, 1 thread, {p['total_ms']:.0f} ms a "
             f"forward (median of {p['runs']} profiled runs); per op type:"]
    for op, ms in p["ops_ms"].items():
        lines.append(f"  {op:<32} {ms:8.1f} ms {100 * ms / p['total_ms']:5.1f}%")
    return "\n".join(lines)


_INT8_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulNBits",
             "QLinearMatMul", "DynamicQuantizeLinear", "DequantizeLinear")


def graph_precision(path: Path) -> str:
    """int8 when the graph holds integer matmul ops, else fp32 (read with onnx, weights
    not loaded; fp32 when onnx is not installed)."""
    try:  # onnx is optional here (the torch extra): without it, fp32
        import onnx
    except ImportError:
        return "fp32"
    proto = onnx.load(str(path), load_external_data=False)
    return "int8" if any(n.op_type in _INT8_OPS for n in proto.graph.node) else "fp32"


def format_cpu_times(r: dict) -> str:
    int8 = (f"{r['core_int8_peak_gops']:.1f} GOP/s" if r["core_int8_peak_gops"]
            else r["peak_model"]["int8"])
    lines = [f"b={r['batch']} s={r['seq']}, 1 thread, CPU ms per forward (median of "
             f"{r['repeats']}); one core's fp32 peak {r['core_peak_gflops']:.1f} GFLOP/s "
             f"({r['peak_model']['fp32']}), int8 peak {int8}"]
    first = r["rows"][0]["ms"]
    for row in r["rows"]:
        ms, gf, pct = row["ms"], row["gflops"], row["pct_core_peak"]
        cell = f"{pct:6.1f}%" if pct is not None else f"{'-':>7}"
        lines.append(f"  {row['graph']:<58} {row['precision']:>4} {ms:9.1f} ms {gf:7.1f} "
                     f"GOP/s {cell}  ×{first / ms:5.2f} vs first"
                     + (f"  ({row['peak_note']})" if pct is None else ""))
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m bertonnx.bench.cpu_time`: its flags live in commands.py
    from bertonnx.runtime.cli.main import run_click

    from .commands import cpu_time_command

    sys.exit(run_click(cpu_time_command, prog_name="python -m bertonnx.bench.cpu_time"))
