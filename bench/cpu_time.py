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
import time
from pathlib import Path

import numpy as np

from bertonnx.runtime.session import create_session

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


_INT8_OPS = ("MatMulInteger", "DynamicQuantizeMatMul", "QAttention", "MatMulNBits",
             "QLinearMatMul", "DynamicQuantizeLinear", "DequantizeLinear")


def graph_precision(path: Path) -> str:
    """int8 when the graph holds integer matmul ops, else fp32 (read with onnx, weights
    not loaded; fp32 when onnx is not installed)."""
    try:
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
    from .commands import cpu_time_command

    cpu_time_command.main(prog_name="python -m bertonnx.bench.cpu_time")
