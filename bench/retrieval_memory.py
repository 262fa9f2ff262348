"""Peak memory of one call per engine on the retrieval benchmark's work, each engine alone in a
fresh process (a process's peak RSS never goes down, so engines sharing one would hide each
other's). SPLADE is where it matters: an MLM head's (B, T, V) logits are 122 KB a token at
bert-base's vocabulary, and engines differ in whether they ever hold them whole.

    python -m bertonnx.bench.retrieval_memory --task sparse --passages 64

Each child builds only its engine (retrieval.engines_for with one precision or one peer),
makes one call on the same work, and prints its peak RSS before and after the call.
"""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from dataclasses import replace

from .retrieval import RetrievalOptions, engines_for, sources, workload

OURS = {"bertonnx-fp32": "none", "bertonnx-int8": "int8"}


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(kind: str, engine: str, options: RetrievalOptions) -> dict:
    """One engine's one call, here: {"engine", "before_mib", "peak_mib"}."""
    options = replace(options, tasks=(kind,),
                      precisions=(OURS[engine],) if engine in OURS else (),
                      peers=() if engine in OURS else (engine,))
    work = options.work.resolve()
    source = sources(options, work, lambda m: None)[kind]
    engines, skipped = engines_for(kind, source, options, work, lambda m: None)
    if not engines:
        return {"engine": engine, "skipped": [s.reason for s in skipped]}
    items = workload(kind, options)
    before = _peak_mib()
    engines[0].e2e(items)
    return {"engine": engines[0].name, "before_mib": round(before), "peak_mib": round(_peak_mib())}


def peak_memory(kind: str, options: RetrievalOptions, say=lambda m: None) -> list[dict]:
    """child() of every engine of `options`, each in its own process."""
    rows = []
    for engine in [k for k, q in OURS.items() if q in options.precisions] + list(options.peers):
        if kind != "embed" and engine == "ctranslate2":
            continue
        say(f"peak memory: {engine}")
        argv = [sys.executable, "-m", "bertonnx.bench.retrieval_memory", "--child", engine,
                "--task", kind, "--work", str(options.work), "--texts", str(options.texts),
                "--passages", str(options.passages), "--queries", str(options.queries),
                "--documents", str(options.documents)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def format_peak_memory(rows: list[dict]) -> str:
    lines = ["| engine | RSS before the call (MiB) | peak RSS (MiB) |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['engine']} | skipped: {'; '.join(r['skipped'])} | |" if "skipped" in r
                     else f"| {r['engine']} | {r['before_mib']} | {r['peak_mib']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # its flags live in commands.py, as every bench command's
    from bertonnx.runtime.cli.main import run_click

    from .commands import retrieval_memory_command

    sys.exit(run_click(retrieval_memory_command, prog_name="python -m bertonnx.bench.retrieval_memory"))
