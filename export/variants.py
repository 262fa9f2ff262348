"""From the fused fp32 graph to the one that ships: convert by each candidate of the precision's
row (int8: the target's recipes) and judge it against the torch model's kept outputs.

    first_passing    the table's order: the first candidate the judge passes (fp32 and fp16
                     have one candidate; an int8 recipe the agreement gate refuses gives way
                     to the next)
    fastest_passing  `--measure-recipes`: every candidate converted and judged, the passing
                     ones timed here, round-robin, at batch 8 × 128 tokens; the fastest ships
                     and the manifest keeps the figures as its evidence

One graph is in memory at a time: the fused graph comes in a one-element list the function
empties (so the caller holds no reference while a session judges), it is kept in the scratch
folder when a later candidate needs it, and each judging session is made from a file.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from bertonnx.build import BertConfig
from bertonnx.runtime.core.atomic import install
from bertonnx.runtime.core.session import create_session

from . import fusion, graph, memory, parity


FUSED = "fused.onnx"   # the fused fp32 graph in the scratch folder, where it is kept


@dataclass(frozen=True)
class Chosen:
    quantization: dict       # the manifest's record
    fused_ops: dict
    parity: dict             # the judge's figures ({} without parity)


@dataclass(frozen=True)
class Job:
    """What converting and judging need: the precision's row, the export's options, ..."""
    row: object
    options: object
    config: BertConfig
    scratch: Path
    tokenizer: object
    reference: object        # parity.Reference, or None without parity
    task: str
    say: object
    keep_fused: bool = False  # the fused fp32 graph stays in the scratch folder (FUSED)


def _convert(job: Job, box: list, variant: str, path: Path) -> tuple[dict, dict]:
    """Convert the proto in `box` (when the row converts), check fusion and write to `path`.
    The box is emptied: the conversion takes the proto out, and drops it once it has no more
    use for it (quantize.int8: before the quantizer loads its own copy)."""
    quant = {"mode": job.options.quantize}
    if job.row.convert is not None:
        job.say(job.row.progress + (f" — recipe {variant}" if variant else ""))
        proto, quant = job.row.convert(box, job.options, job.scratch, variant, job.tokenizer)
        memory.release()
    else:
        proto = box.pop()
    counts = fusion.fused_counts(proto)
    if job.options.optimize:
        fusion.check_fused(counts, job.config)
    graph.save_model(proto, path)
    del proto
    memory.release()
    return quant, counts


def first_passing(job: Job, box: list, model_path: Path) -> Chosen:
    proto = box.pop()
    variants = job.row.candidates(job.options, job.tokenizer)
    fused = job.scratch / FUSED  # what a refused recipe's successor starts from
    if len(variants) > 1 or job.keep_fused:
        graph.save_model(proto, fused)  # (its weights move to the file: read back from there)
        proto = None
    tried = []
    for i, variant in enumerate(variants):
        current, proto = [proto if proto is not None else onnx.load(str(fused))], None
        quant, counts = _convert(job, current, variant, model_path)
        if job.reference is None:
            return Chosen(quant, counts, {})
        job.say("checking parity against the torch model's outputs")
        figures = job.row.judge(job.reference, parity.session(model_path))
        if figures.get("passed", True):
            if tried:
                quant["refused_first"] = tried
            return Chosen(quant, counts, figures)
        tried.append({"recipe": variant, "agreement": figures.get("agreement")})
        if i + 1 == len(variants):
            raise job.row.refusal(job.task, figures)
        job.say(f"recipe {variant} refused (agreement {figures.get('agreement'):.3f}); "
                f"trying {variants[i + 1]}")
    raise AssertionError("a precision row with no candidates")


def fastest_passing(job: Job, box: list, model_path: Path, *,
                    rounds: int = 5, batch: int = 8, seq: int = 128) -> Chosen:
    proto = box.pop()
    variants = job.row.candidates(job.options, job.tokenizer)
    fused = job.scratch / FUSED
    graph.save_model(proto, fused)
    del proto
    made = {}
    for variant in variants:
        path = job.scratch / f"candidate-{variant}.onnx"
        quant, counts = _convert(job, [onnx.load(str(fused))], variant, path)
        job.say(f"judging recipe {variant}")
        figures = job.row.judge(job.reference, parity.session(path))
        made[variant] = (path, quant, counts, figures)
    passing = [v for v in variants if made[v][3].get("passed", True)]
    if not passing:
        raise job.row.refusal(job.task, made[variants[-1]][3])
    job.say(f"timing {', '.join(passing)} at batch {batch} × {seq} tokens, {rounds} rounds")
    ms = _time(job.config, {v: made[v][0] for v in passing}, rounds, batch, seq)
    best = min(passing, key=ms.get)
    path, quant, counts, figures = made[best]
    install(path, model_path)  # from the scratch folder to the export's, both being built
    quant["evidence"] = {
        "measured_here": {v: {"ms": round(ms[v], 2) if v in ms else None,
                              "agreement": made[v][3].get("agreement"),
                              "passed": v in passing} for v in variants},
        "how": f"median of {rounds} round-robin runs at batch {batch} × {seq} tokens, "
               "onnxruntime default threads; the fastest recipe that passed the gate"}
    return Chosen(quant, counts, figures)


def _time(c: BertConfig, paths: dict[str, Path], rounds: int, batch: int, seq: int
          ) -> dict[str, float]:
    """Median ms per graph, interleaved so other load falls on all alike."""
    sessions = {v: create_session(p) for v, p in paths.items()}
    rng = np.random.default_rng(0)
    ids = rng.integers(min(c.pad_token_id + 1, c.vocab_size - 1), c.vocab_size,
                       (batch, min(seq, c.max_tokens)), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "token_type_ids": np.zeros_like(ids)}
    times = {v: [] for v in sessions}
    for s in sessions.values():
        s.run(feeds)  # warm-up
    for _ in range(rounds):
        for v, s in sessions.items():
            t0 = time.perf_counter()
            s.run(feeds)
            times[v].append((time.perf_counter() - t0) * 1000)
    return {v: statistics.median(t) for v, t in times.items()}
