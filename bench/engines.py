"""The engines a benchmark compares: each one a way of answering the same inputs.

    onnx          bertonnx's own pipeline and session, exactly as users get them from `load`
    torch         the scratch torch model (bertonnx.build), same tokenizer, softmax/argmax
    transformers  a transformers pipeline on the reference checkpoint, at its best batch size
    (Optimum, in optimum.py: an ORTModel inside a transformers pipeline)

An engine has `e2e(inputs) -> one comparable answer per input` (tokenize → run → post-process)
and/or `forward(feeds)` (the model alone, on ready int64 feeds). torch and transformers are
imported only when such an engine is made, so the runtime's engine stays torch-free.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from bertonnx.runtime.core.batches import micro_batches
from bertonnx.runtime.core.contract import INPUT_NAMES
from bertonnx.runtime.core.pipelines import load
from bertonnx.runtime.core.tasks import task_record
from bertonnx.runtime.core.tokenizer import load_tokenizer

from .inputs import model_max_length, plain_texts, random_feeds


@dataclass
class Engine:
    """One way of answering: `e2e(inputs) -> top labels` and/or `forward(feeds)`."""

    name: str
    e2e: Callable[[list], list] | None = None
    forward: Callable[[dict], object] | None = None
    model_name: str = ""     # row name in the model-only tables (default: name)
    precision: str = "fp32"  # which peak its GFLOP/s are read against: fp32 | int8 | fp16
    facts: dict = field(default_factory=dict)  # what it set process-wide, for the machine facts
    # e2e's output -> what accuracy compares (retrieval.py: vectors, scores); None: as it is.
    # Kept out of e2e so the timed call is the library call alone.
    answer: Callable[[object], object] | None = None

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
    if task_record(task).vector_output:  # a vector per input: no label to compare
        return [None] * len(results)
    return [one(r) for r in results]


def onnx_engine(name: str, folder: Path, threads: int, providers=None,
                streams: int | str = 1) -> Engine:
    """bertonnx's own pipeline and session (runtime/core/session.py's), as users get them;
    `providers` the engine (runtime/core/engines.py; None: `auto`, as `load` defaults);
    `streams` as `load` takes it. With several streams the row is end to end only (its model
    calls are the same graph's) and its name says how many."""
    pipe = load(folder, threads=threads, providers=providers, streams=streams)
    streams = pipe.session.config.streams
    if streams > 1:
        name += f" ({streams} streams)"
    task = pipe.task
    session = pipe.session
    mode = pipe.folder.manifest.quantization.get("mode", "none")
    vectors = task_record(task).vector_output

    def e2e(inputs):  # task_inputs' shapes are ones the pipeline reads (read_inputs)
        out = pipe(inputs)
        return out if vectors else top_labels(task, out)

    return Engine(name, e2e=e2e, forward=(lambda feeds: session.run(feeds)) if streams == 1
                  else None,
                  precision="fp32" if mode == "none" else mode,
                  answer=(lambda out: out) if vectors else None,
                  facts={f"engine {name}": f"{session.config.engine}:{session.config.precision}"
                         f" ({session.config.reason})"})


def torch_engine(reference: str | Path, task: str, threads: int, tokenizer_dir: Path
                 ) -> Engine:
    """The scratch torch model with the same tokenizer, length-sorted batches of 32 and
    softmax/argmax post-processing (less than a pipeline does: a lower bound on its time)."""
    # torch and the scratch model only for this baseline: `bertonnx bench` runs without them
    import torch

    from bertonnx.build import load_pretrained

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
        backend.enable_truncation(max_len)
        encs = backend.encode_batch(plain_texts(inputs))
        out = [None] * len(encs)
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
                  facts={"torch_threads": f"torch threads {torch_threads}"})


def best_torch_threads(model, threads: int, vocab: int) -> int:
    """torch's thread count for the baselines: the faster of 1 and `threads` on a short and a
    mid-size forward. Measured here: with a neighbour busy on one of 2 cores, torch's OpenMP
    at 2 threads took 480 ms for a b=1 s=16 MiniLM forward that 1 thread does in 18 ms (each
    parallel region waits for a descheduled thread); the baselines get their best setting."""
    import torch  # the torch baselines only: the bench runs without torch

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
                       inputs: list, batch_sizes: tuple[int, ...], max_length: int) -> Engine:
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
                  e2e=lambda xs: top_labels(task, _call_hf(pipe, task, xs, max_length)))


def _call_hf(pipe, task: str, inputs: list, max_length: int):
    """The inputs in the forms transformers' pipelines take, one result per input."""
    if inputs and isinstance(inputs[0], dict):  # several fields (QA's): a list per keyword
        out = pipe(**{name: [x[name] for x in inputs] for name in inputs[0]})
        return out if isinstance(out, list) else [out]
    if task_record(task).hf_truncation:
        # truncated to the same length as bertonnx's pipelines, or long passages crash it
        return pipe(inputs, truncation=True, max_length=max_length)
    return pipe(inputs)


def transformers_engine(reference: str | Path, task: str, inputs: list,
                        batch_sizes: tuple[int, ...], forward: bool = False) -> Engine:
    """A transformers pipeline (one model, shared by the pipelines of each batch size tried);
    `forward`: also its model alone on the feeds (the "transformers model (torch)" row)."""
    # transformers and torch are optional: only for this baseline
    import torch
    from transformers import pipeline

    # torch's thread count: set by torch_engine (best_torch_threads)
    first = pipeline(task, model=str(reference), tokenizer=str(reference), device=-1)

    def make(bs):
        return pipeline(task, model=first.model, tokenizer=first.tokenizer, device=-1,
                        batch_size=bs)

    engine = hf_pipeline_engine("transformers pipeline (torch)", make, task, inputs,
                                batch_sizes, model_max_length(reference))
    if forward:
        model, names = first.model, first.tokenizer.model_input_names

        def run_model(feeds):
            with torch.inference_mode():
                return model(**{n: torch.from_numpy(feeds[n]) for n in names if n in feeds})

        engine.forward, engine.model_name = run_model, "transformers model (torch)"
    return engine
