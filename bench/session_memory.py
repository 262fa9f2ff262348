"""What one onnxruntime session of a graph costs in memory, per way of loading it: peak and
resident RSS of a fresh process that creates the session and answers once, beside the
weights' size, and the model-only speed of each way (round-robin, in one process).

    python -m bertonnx.bench.session_memory EXPORT_DIR [--rounds 5]

Peak RSS is the child's VmHWM (its own address space's high-water mark): getrusage's
ru_maxrss would carry this process's peak across fork and exec.

Ways, each from a copy of the export's graph: the weights inside model.onnx (a single file,
as exports were written until 2026-11-23) loaded from its path, from bytes in memory, and
with `session.disable_prepacking`; the weights in an external data file beside it (what
every export writes now: onnxruntime maps that file instead of copying it), with and without
prepacking.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from bertonnx.export.graph import graph_bytes
from bertonnx.runtime.core.session import create_session

WAYS = {"single file, path": ("path", False), "single file, bytes": ("bytes", False),
        "single file, prepacking off": ("path", True),
        "external data (exports now)": ("external", False),
        "external data, prepacking off": ("external", True)}

_CHILD = r"""
import json, sys, numpy as np
from bertonnx.runtime.core.session import create_session
path, source, no_prepack = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
def rss(key="VmRSS"):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
base = rss()
model = open(path, "rb").read() if source == "bytes" else path
s = create_session(model, prepacking=not no_prepack)
del model
ids = np.full((1, 16), 1000, dtype=np.int64)
s.run({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
print(json.dumps({"base_mib": base, "resident_mib": rss(),
                  "peak_mib": rss("VmHWM")}))
"""


def copies(graph: Path, folder: Path) -> dict[str, Path]:
    """The graph with its weights inside ("path") and in an external data file ("external")."""
    (folder / "single").mkdir()
    (folder / "external").mkdir()
    single, external = folder / "single" / "model.onnx", folder / "external" / "model.onnx"
    onnx.save_model(onnx.load(str(graph)), str(single))
    onnx.save_model(onnx.load(str(graph)), str(external), save_as_external_data=True,
                    location="model.onnx.data", size_threshold=1024)
    return {"path": single, "bytes": single, "external": external}


def measure(export: Path, rounds: int, repeats: int = 3) -> dict:
    graph = export / "model.onnx"
    weights = graph_bytes(graph) / 2**20
    with tempfile.TemporaryDirectory() as d:
        paths = copies(graph, Path(d))
        runs = {name: [] for name in WAYS}
        for _ in range(repeats):  # round-robin; a session's RSS varies run to run (threads)
            for name, (source, no_prepack) in WAYS.items():
                done = subprocess.run([sys.executable, "-c", _CHILD, str(paths[source]),
                                       source, "1" if no_prepack else "0"],
                                      capture_output=True, text=True)
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        rows = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                for name, rs in runs.items()}
        rows_speed = speed(paths, rounds)
    for name, ms in rows_speed.items():
        rows[name]["b32_s128_ms"] = ms
    return {"export": str(export), "weights_mib": weights, "rows": rows}


def speed(paths: dict, rounds: int) -> dict[str, float]:
    """Median ms of a b32 s128 forward per way, round-robin (bytes = path: same session)."""
    sessions = {name: create_session(paths[source], prepacking=not no_prepack)
                for name, (source, no_prepack) in WAYS.items() if source != "bytes"}
    ids = np.random.default_rng(0).integers(1000, 20000, (32, 128), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "token_type_ids": np.zeros_like(ids)}
    times = {name: [] for name in sessions}
    for s in sessions.values():
        s.run(feeds)
    for _ in range(rounds):
        for name, s in sessions.items():
            time.sleep(0.05)
            t0 = time.perf_counter()
            s.run(feeds)
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def format_measure(r: dict) -> str:
    w = r["weights_mib"]
    lines = [f"{r['export']}: weights {w:.0f} MiB; fresh process, session + one answer "
             "(b1 s16); medians of 3 processes",
             f"  {'way':<32} {'peak MiB':>9} {'resident':>9} {'peak - base':>12} "
             f"{'b32 s128 ms':>12}"]
    for name, row in r["rows"].items():
        ms = row.get("b32_s128_ms")
        lines.append(f"  {name:<32} {row['peak_mib']:9.0f} {row['resident_mib']:9.0f} "
                     f"{row['peak_mib'] - row['base_mib']:12.0f} "
                     f"{f'{ms:12.1f}' if ms else '':>12}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.session_memory")
    ap.add_argument("export", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    print(format_measure(measure(a.export, a.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
