"""Footprint: cold start (wall time and peak RSS of a fresh process to its first answer) and
artifact size on disk.

    parent (big: engines loaded) ─ python -c _SPAWN argv ─ argv (measured by os.wait4)

The small middle process is there because Linux carries a process's peak RSS across exec: a
child forked straight from this benchmark process would report our size, not its own.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.tasks import task_record

from .inputs import task_inputs
from .timing import stats

# Runs one command and prints {"wall": s, "rss_kib": n, "rc": n, "out": bytes, "err": tail}.
_SPAWN = """
import json, os, subprocess, sys, tempfile, time
e = tempfile.TemporaryFile()
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=e)
out = p.stdout.read()
_, status, usage = os.wait4(p.pid, 0)
e.seek(0)
err = e.read()
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "rss_kib": usage.ru_maxrss, "rc": os.waitstatus_to_exitcode(status),
                  "out": len(out), "err": err.decode(errors="replace")[-300:]}))
"""
WEIGHT_SUFFIXES = (".onnx", ".safetensors", ".bin", ".data")


def cold_start(argv: list[str], repeats: int) -> dict:
    """Wall seconds until a fresh process has printed its answer and exited, and its peak
    RSS (os.wait4's rusage covers that child alone). One unmeasured run warms the page cache."""
    walls, rss = [], []
    for i in range(repeats + 1):
        done = subprocess.run([sys.executable, "-c", _SPAWN, *argv], capture_output=True,
                              text=True)
        try:
            got = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            got = {"rc": done.returncode, "out": 0, "err": done.stderr[-300:]}
        if got["rc"] != 0 or not got["out"]:
            last = (got["err"].strip().splitlines() or [""])[-1]
            raise ArtifactError(f"cold-start command gave no answer (exit {got['rc']}: "
                                f"{last[:200]}): {' '.join(argv)[:200]}",
                                "run it by hand to see why")
        if i:
            walls.append(got["wall"])
            rss.append(got["rss_kib"] / 1024)  # Linux reports KiB
    return {"wall_s": stats(walls), "peak_rss_mib": float(np.median(rss)), "argv": argv}


def cli_argv(folder: Path, task: str, text: str) -> list[str]:
    """`bertonnx <task command> FOLDER <text>`: what a user runs for one answer. An input of
    several fields (QA's) is given as one option per field (--question, --context)."""
    exe = Path(sys.executable).with_name("bertonnx")
    base = [str(exe)] if exe.is_file() else [sys.executable, "-m", "bertonnx.runtime.cli"]
    one = task_inputs(task, [text])[0]
    args = ([a for name, value in one.items() for a in ("--" + name, value)]
            if isinstance(one, dict) else [one])
    return base + [task_record(task).command, str(folder), *args]


def transformers_script_argv(reference: str | Path, task: str, text: str) -> list[str]:
    """The transformers equivalent: a script that builds a pipeline and answers once."""
    code = ("import sys\nfrom transformers import pipeline\n"
            f"p = pipeline({task!r}, model=sys.argv[1], device=-1)\n"
            "print(p(sys.argv[2]))\n")
    arg = task_inputs(task, [text])[0]
    if isinstance(arg, dict):  # an input of several fields (QA's): keyword arguments
        code = (code.replace("import sys", "import json, sys")
                .replace("p(sys.argv[2])", "p(**json.loads(sys.argv[2]))"))
        arg = json.dumps(arg)
    return [sys.executable, "-c", code, str(reference), arg]


def folder_size(path: Path) -> dict:
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    weights = [p for p in files if p.suffix in WEIGHT_SUFFIXES]
    return {"total_mb": sum(p.stat().st_size for p in files) / 1e6,
            "weights_mb": sum(p.stat().st_size for p in weights) / 1e6}
