"""CPU seconds per forward of ONNX graphs on one thread: a figure other processes' load barely moves.

    python benchmarks/cpu_time.py --batch 32 --seq 128 A.onnx B.onnx ...

On a shared 2-core machine wall-clock throughput swings with the neighbours; with one
intra-op thread onnxruntime runs the graph in the calling thread, so that thread's CPU time
(time.thread_time) is the graph's cost alone. Graphs are interleaved round-robin on the same
random feed; medians are reported, with matmul GFLOP/s per core against one core's fp32 peak
(32 FLOP/cycle × clock). Used for graph- and kernel-level choices (int8 weight type,
fusion); wall-clock, multi-thread figures come from benchmarks/bench.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from bertonnx.runtime.session import create_session

from bertonnx.export.bench import FLOP_PER_CYCLE, cpu_clock_ghz, encoder_flops, random_feeds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--config", type=Path, help="config.json for the FLOP count (default: the "
                    "first graph's folder)")
    args = ap.parse_args(argv)

    config = json.loads((args.config or args.graphs[0].parent / "config.json").read_text())
    sessions = []
    for g in args.graphs:
        # one thread: the run happens in this thread, so thread_time sees all of it
        sessions.append(create_session(g, threads=1).inner)
    base = random_feeds(args.batch, args.seq, int(config["vocab_size"]))
    feeds = [{i.name: base[i.name] for i in s.get_inputs()} for s in sessions]
    for s, f in zip(sessions, feeds):
        s.run(None, f)  # warm-up
    cpu = [[] for _ in sessions]
    for _ in range(args.repeats):
        for k, (s, f) in enumerate(zip(sessions, feeds)):
            t0 = time.thread_time()
            s.run(None, f)
            cpu[k].append(time.thread_time() - t0)
    flops = encoder_flops(config, args.batch, args.seq)
    core_peak = FLOP_PER_CYCLE * cpu_clock_ghz()
    print(f"b={args.batch} s={args.seq}, 1 thread, CPU ms per forward (median of {args.repeats}),"
          f" one core's fp32 peak {core_peak:.1f} GFLOP/s")
    first = float(np.median(cpu[0]))
    for g, ts in zip(args.graphs, cpu):
        m = float(np.median(ts))
        gf = flops / m / 1e9
        print(f"  {str(g):<58} {m * 1000:9.1f} ms {gf:7.1f} GFLOP/s {100 * gf / core_peak:6.1f}%"
              f"  ×{first / m:5.2f} vs first")
    return 0


if __name__ == "__main__":
    sys.exit(main())
