"""The micro-batch limits (padded tokens per session call, rows kept past them) end to end.

    python -m bertonnx.bench.batch_caps FOLDER --work sentences --caps 2048:1,1024:4,512:4

Each configuration is `TOKENS:ROWS[:MULTIPLE]`: a call stops at TOKENS padded tokens unless
it holds fewer than ROWS texts, its width rounded up to MULTIPLE (runtime/core/batches.py; the
engine's where not given; the runtime's default first where no --caps is given). One loaded
pipeline runs the same work under each configuration, round-robin with
the order rotated each round (timing.round_robin), so background load falls on all alike;
texts/s are medians, with each configuration's ratio to the first. `--memory` also runs each
configuration once in a fresh process and reports its peak RSS (VmHWM): the arena keeps a
call's high-water mark, so the cap bounds a server's memory too.

`--fresh` draws new calls each round and gives each configuration its own loaded pipeline: an
engine that compiles kernels per input shape (OpenVINO) then meets shapes it has not run, as a
server meeting new texts does, and `--memory` reports the peak after --rounds such draws.

The work is what a server or a bulk job hands the pipeline: `sentences` and `passages`
(bench/inputs.py prose, in calls of 16 and 128 texts: two small calls to one large), or
`pairs`, a cross-encoder's (query, 100 passages) calls.
"""
from __future__ import annotations

import itertools
import multiprocessing
import queue
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from random import Random

from bertonnx.runtime import load
from bertonnx.runtime.core.batches import MAX_BATCH_TOKENS, MIN_BATCH_ROWS
from bertonnx.runtime.core.errors import InputError

from .inputs import prose_passages, prose_sentences
from .machine import cpu_model, instruction_sets
from .runner import quiet_logs
from .timing import round_robin

@dataclass(frozen=True)
class Cap:
    tokens: int
    rows: int
    multiple: int | None = None   # batch widths rounded up to it; None: the engine's

    @property
    def label(self) -> str:
        widths = "" if self.multiple is None else f", widths ×{self.multiple}"
        return f"{self.tokens} tokens, ≥ {self.rows} rows{widths}"


def parse_caps(text: str | None) -> list[Cap]:
    """"2048:1,512:4:16" -> caps (TOKENS:ROWS[:MULTIPLE]); none given: the runtime's default
    alone."""
    if not text:
        return [Cap(MAX_BATCH_TOKENS, MIN_BATCH_ROWS)]
    caps = []
    for part in text.split(","):
        tokens, _, rest = part.strip().partition(":")
        rows, _, multiple = rest.partition(":")
        try:
            cap = Cap(int(tokens), int(rows or 1), int(multiple) if multiple else None)
        except ValueError:
            raise InputError(f"--caps wants TOKENS:ROWS[:MULTIPLE], got {part!r}",
                             "e.g. --caps 2048:1,512:4:16") from None
        if min(cap.tokens, cap.rows, cap.multiple or 1) < 1:
            raise InputError(f"--caps: {part!r} is not positive", "e.g. --caps 2048:1,512:4")
        if cap in caps:
            raise InputError(f"--caps names {part.strip()!r} twice", "name each TOKENS:ROWS once")
        caps.append(cap)
    return caps


def _sizes(work: str, calls: int) -> list[int]:
    """The texts of each call of the work (pairs: each query's documents), whatever the draw."""
    if work == "pairs":
        return [100] * max(1, calls // 10)
    return [16 if i % 3 else 128 for i in range(calls)]


def workload(pipe, work: str, calls: int, seed: int = 0):
    """(one call of the work, texts it handles): the calls are drawn once, the same for all."""
    rng, sizes = Random(seed), _sizes(work, calls)
    if work == "pairs":
        docs, queries = prose_passages(sizes[0]), prose_sentences(len(sizes), 6, 16)
        return (lambda: [pipe(q, docs, top_k=None) for q in queries]), sum(sizes)
    texts = prose_sentences(512) if work == "sentences" else prose_passages(512)
    batches = [rng.sample(texts, k) for k in sizes]
    return (lambda: [pipe(b) for b in batches]), sum(sizes)


def fresh_workload(pipe, work: str, calls: int):
    """As `workload`, but each run draws new calls from the prose (run k: seed k, the same
    sequence for every configuration), so an engine meets shapes it has not run before, as a
    server does. (pairs: the same calls each run.)"""
    draws = itertools.count()

    def run():
        workload(pipe, work, calls, seed=next(draws))[0]()
    return run, sum(_sizes(work, calls))   # every draw handles as many texts


def _configured(pipe, cap: Cap, run):
    session = pipe.session.config

    def call():
        pipe.batch_tokens, pipe.batch_rows = cap.tokens, cap.rows
        if cap.multiple is not None:
            pipe.session.config = replace(session, pad_multiple=cap.multiple)
        with quiet_logs():  # passages past the model's length are truncated on purpose
            run()
    return call


def throughput(folder: Path, work: str, caps: list[Cap], *, calls: int = 30, rounds: int = 5,
               threads: int | None = None, fresh: bool = False) -> dict[Cap, list[float]]:
    """texts (pairs) per second of each cap, one value per round. `fresh`: new calls each
    round, and each cap on its own loaded pipeline, so no cap runs a shape another compiled."""
    shared = None if fresh else load(folder, threads=threads)
    fns, count = {}, 0
    for cap in caps:
        pipe = shared or load(folder, threads=threads)
        run, count = (fresh_workload if fresh else workload)(pipe, work, calls)
        fns[cap] = _configured(pipe, cap, run)
    times = round_robin(fns, rounds, warmup=1, rotate=True)
    return {cap: [count / t for t in ts] for cap, ts in times.items()}


def _peak_child(folder, work, cap, calls, threads, fresh, out):
    pipe = load(folder, threads=threads)
    run, _ = (fresh_workload if fresh else workload)(pipe, work, calls)
    for _ in range(fresh or 1):
        _configured(pipe, cap, run)()
    with open("/proc/self/status") as f:
        out.put(next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM")))


def peak_rss_mb(folder: Path, work: str, cap: Cap, *, calls: int = 30,
                threads: int | None = None, fresh: int = 0) -> int:
    """Peak RSS (MiB) of a fresh process that loads the folder and runs the work once (or
    `fresh` runs of new calls: a server's memory after meeting that many)."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing inherited
    out = ctx.Queue()
    child = ctx.Process(target=_peak_child, args=(folder, work, cap, calls, threads, fresh, out))
    child.start()
    try:
        while True:  # until the child answers, or has ended without an answer
            try:
                return out.get(timeout=1)
            except queue.Empty:
                if not child.is_alive():
                    raise RuntimeError(f"the peak-memory process for {cap.label} ended with "
                                       f"exit code {child.exitcode} before it answered") from None
    finally:
        child.join(timeout=30)


def caps_report(folder: Path, work: str, results: dict[Cap, list[float]],
                peaks: dict[Cap, int] | None = None) -> dict:
    base = statistics.median(next(iter(results.values())))
    rows = []
    for cap, values in results.items():
        median = statistics.median(values)
        rows.append({"tokens": cap.tokens, "rows": cap.rows, "multiple": cap.multiple,
                     "per_s": median,
                     "min": min(values), "max": max(values), "ratio": median / base,
                     "peak_rss_mb": (peaks or {}).get(cap)})
    return {"folder": str(folder), "work": work, "cpu": cpu_model(),
            "instruction_sets": instruction_sets(), "results": rows}


def format_caps(rep: dict) -> str:
    unit = "pairs/s" if rep["work"] == "pairs" else "texts/s"
    lines = [f"{rep['folder']}, {rep['work']}; CPU: {rep['cpu']} "
             f"({' '.join(rep['instruction_sets'])})",
             f"| cap | {unit} (median) | min–max | × the first | peak RSS MB |",
             "|---|---|---|---|---|"]
    for r in rep["results"]:
        peak = "—" if r["peak_rss_mb"] is None else str(r["peak_rss_mb"])
        widths = "" if r["multiple"] is None else f", widths ×{r['multiple']}"
        lines.append(f"| {r['tokens']} tokens, ≥ {r['rows']} rows{widths} | {r['per_s']:.1f} | "
                     f"{r['min']:.1f}–{r['max']:.1f} | {r['ratio']:.2f} | {peak} |")
    return "\n".join(lines)


if __name__ == "__main__":  # `python -m bertonnx.bench.batch_caps`: its flags live in commands.py
    from bertonnx.runtime.cli.main import run_click

    from .commands import batch_caps_command

    sys.exit(run_click(batch_caps_command, prog_name="python -m bertonnx.bench.batch_caps"))
