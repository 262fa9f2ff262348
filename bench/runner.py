"""`run(engines, options, workload)`: the one benchmark loop every preset calls.

    inputs ─┬─ end to end (e2e engines, round-robin): items/s, agreement with the baseline
    feeds  ─┼─ model only (forward engines, round-robin): latency b=1 at each seq (median,
            │  p90); b×s throughput as achieved GFLOP/s against the CPU's fp32 peak
    argv   ─┼─ cold start: wall time and peak RSS of each command in a fresh process
    folders ┴─ size on disk
                                      ↓
                              Result (report.py: text or JSON)
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tasks import task_record
from bertonnx.runtime.core.tokenizer import load_tokenizer

from .engines import Engine
from .footprint import cold_start, folder_size
from .inputs import describe_texts, model_max_length, random_feeds
from .machine import cores, load_avg, machine_info, percent_of_peak
from .report import Result
from .timing import encoder_flops, round_robin, stats


@dataclass(frozen=True)
class BenchOptions:
    texts: int = 512                    # end-to-end inputs
    repeats: int = 5                    # timed rounds per section (median reported)
    warmup: int = 1                     # untimed rounds first
    threads: int | None = None          # intra-op threads; None = the CPUs this process may use
    latency_seqs: tuple[int, ...] = (16, 128, 384)
    batch: int = 32
    batch_seq: int = 128
    pipeline_batch_sizes: tuple[int, ...] = (1, 8, 32)  # transformers pipeline: best one wins
    cold_repeats: int = 3
    cold_start: bool = True
    # `bertonnx bench DIR`: the engines to time the export on, "all" (every one this machine
    # runs it with) or engine:precision keys, comma-separated (runtime/core/engines.py)
    engines: str = "all"

    def __post_init__(self):
        for name in ("texts", "repeats", "batch", "batch_seq", "cold_repeats"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be ≥ 1, got {getattr(self, name)}",
                                 f"pass a positive --{name.replace('_', '-')}")

    @property
    def n_threads(self) -> int:
        return self.threads or cores()


# `--quick`: tiny sizes, so a run checks that everything works, in seconds
QUICK = dict(texts=24, repeats=2, warmup=1, latency_seqs=(8, 16), batch=4, batch_seq=16,
             pipeline_batch_sizes=(1, 8), cold_repeats=1)


@dataclass(frozen=True)
class Workload:
    """What the engines are measured on, and what else the run measures beside them."""

    task: str
    config: dict                        # the model's config.json: vocab for feeds, FLOP count
    inputs: list                        # end-to-end inputs, shaped for the task (task_inputs)
    tokenizer_dir: Path                 # describes the inputs' token lengths
    baseline: str | None = None         # engine the others' agreement and ratio are against
    cold_starts: dict[str, list[str]] = field(default_factory=dict)  # name -> argv
    folders: dict[str, Path] = field(default_factory=dict)           # name -> folder to size


def run(engines: list[Engine], options: BenchOptions, workload: Workload,
        say=lambda m: None) -> Result:
    """Time `engines` on the same inputs and feeds, then cold starts and sizes."""
    result = Result(machine_info(options.n_threads), asdict(options), workload.baseline)
    for e in engines:
        result.machine.update(e.facts)
    result.text_set = describe_texts(workload.inputs, load_tokenizer(workload.tokenizer_dir),
                                     model_max_length(workload.tokenizer_dir))
    with quiet_logs():
        _end_to_end(engines, options, workload, result, say)
        _latency(engines, options, workload, result, say)
        _throughput(engines, options, workload, result, say)
    if options.cold_start and workload.cold_starts:
        say("cold start")
        for name, argv in workload.cold_starts.items():
            result.cold_start[name] = cold_start(argv, options.cold_repeats)
    for name, folder in workload.folders.items():
        result.sizes[name] = folder_size(folder)
    base = result.end_to_end.get(workload.baseline)
    for name, row in result.end_to_end.items():
        if base and name != workload.baseline:
            result.ratios[f"end to end: {name} / {workload.baseline}"] = (
                row["items_per_s"] / base["items_per_s"])
    result.machine["load_avg_end"] = load_avg()
    return result


def _end_to_end(engines, options, workload, result, say) -> None:
    e2e = {e.name: e for e in engines if e.e2e is not None}
    if not e2e:
        return
    inputs = workload.inputs
    say(f"end to end: {len(inputs)} inputs × {options.repeats} rounds, {len(e2e)} engines")
    answers = {name: e.e2e(inputs) for name, e in e2e.items()}  # also the warm-up
    times = round_robin({n: (lambda e=e: e.e2e(inputs)) for n, e in e2e.items()},
                        options.repeats, 0)
    ref = answers.get(workload.baseline)
    for name, t in times.items():
        s = stats(t)
        row = {"items_per_s": len(inputs) / s["median"], "seconds": s}
        if ref is not None and not task_record(workload.task).vector_output:
            row["agreement"] = sum(a == b for a, b in zip(answers[name], ref)) / len(ref)
        elif ref is not None and _vectors(answers[name]) and _vectors(ref):
            row["cosine"] = row_cosines(answers[name], ref)
        result.end_to_end[name] = row


def _vectors(answers) -> bool:
    return bool(answers) and all(a is not None and np.ndim(a) == 1 for a in answers)


def row_cosines(got: list, ref: list) -> dict:
    """Mean and worst cosine of each input's vector to the baseline's (vector tasks)."""
    a = np.asarray(got, np.float64)
    b = np.asarray(ref, np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"mean": float(cos.mean()), "worst": float(cos.min())}


def _forwards(engines) -> dict[str, Engine]:
    return {e.row: e for e in engines if e.forward is not None}


def _latency(engines, options, workload, result, say) -> None:
    fwd = _forwards(engines)
    vocab = int(workload.config.get("vocab_size", 30522))
    for seq in options.latency_seqs:
        say(f"latency b=1 s={seq}")
        feeds = random_feeds(1, seq, vocab, seed=seq)
        times = round_robin({n: (lambda e=e: e.forward(feeds)) for n, e in fwd.items()},
                            max(options.repeats * 4, 5), options.warmup + 1)
        for name, t in times.items():
            result.latency.setdefault(name, {})[str(seq)] = {
                k: (v * 1000 if k != "n" else v) for k, v in stats(t).items()}


def _throughput(engines, options, workload, result, say) -> None:
    B, T = options.batch, options.batch_seq
    say(f"throughput b={B} s={T}")
    feeds = random_feeds(B, T, int(workload.config.get("vocab_size", 30522)), seed=1)
    flops = encoder_flops(workload.config, B, T)
    # each row against its own precision's peak (machine.peak_model): int8 GEMMs count 2
    # operations per multiply-add, like FLOP
    peaks = {"fp32": result.machine["peak_gflops"], "int8": result.machine.get("int8_peak_gops")}
    fwd = _forwards(engines)
    times = round_robin({n: (lambda e=e: e.forward(feeds)) for n, e in fwd.items()},
                        options.repeats, options.warmup)
    for name, t in times.items():
        s = stats(t)
        gf = flops / s["median"] / 1e9
        pct, note = percent_of_peak(gf, peaks.get(fwd[name].precision))
        result.throughput[name] = {"ms": s["median"] * 1000, "p90_ms": s["p90"] * 1000,
                                   "seq_per_s": B / s["median"], "gflops": gf,
                                   "precision": fwd[name].precision, "pct_peak": pct,
                                   "peak_note": note, "gflop_per_batch": flops / 1e9}


@contextlib.contextmanager
def quiet_logs():
    """The text set truncates long passages on purpose: one warning per timed call is noise."""
    loggers = [logging.getLogger(n) for n in ("bertonnx", "transformers")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
