"""The model-only grid (issue 30, item 1b): each engine's forward alone on the same token ids,
batch × length, every cell timed round-robin, beside each engine's accuracy on real prose.

    python -m bertonnx.bench.grid                # all-MiniLM-L6-v2, 6 × 3 cells, 5 rounds
    python -m bertonnx.bench.grid --quick        # 3 cells, 2 rounds: checks that it runs
    python -m bertonnx.bench.grid --json grid.json --lengths 128,256 --batches 8,32

Engines (those installed; a missing one is a Skipped line, never an error):

    bertonnx fp32, int8        the exports' onnxruntime sessions, as `load` makes them
                               (retrieval.py's exports of the same folder, reused)
    CTranslate2 float32, int8  Encoder.forward_batch on the same ids (peers.ct2_model)
    sentence-transformers ONNX, ONNX O3, ONNX int8
                               onnxruntime sessions on its export folder (peers.st_artifacts);
                               its int8 is export_dynamic_quantized_onnx_model: Optimum's
                               ORTQuantizer with the AutoQuantizationConfig for this CPU
    OpenVINO                   the model of its openvino backend, compiled for CPU with
                               OpenVINO's defaults (bf16 where the CPU has it)
    transformers (torch)       AutoModel under inference_mode, its best thread count

What is timed is the forward on ready int64 arrays (CTranslate2: lists of ids, its input),
the (B, T, H) hidden states out; tokenization and pooling are not in it. Accuracy is each
engine's hidden states on `texts` held-out prose sentences (real ids, padded to the longest,
mean pooled over the mask in numpy — the same for every engine), cosine to the torch fp32
model's: mean and worst.
"""
from __future__ import annotations

import gc
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bertonnx.runtime.core.contract import INPUT_NAMES
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.pipelines import load
from bertonnx.runtime.core.session import create_session
from bertonnx.runtime.core.tokenizer import load_tokenizer

from . import peers
from .engines import best_torch_threads
from .inputs import prose_sentences, random_feeds
from .machine import cores, load_avg, machine_info
from .retrieval import bertonnx_export, bertonnx_label, peer_versions
from .timing import round_robin, stats

BATCHES = (1, 8, 32)
LENGTHS = (16, 32, 64, 128, 256, 512)
ENGINES = ("bertonnx", "ctranslate2", "st-onnx", "st-onnx-o3", "st-onnx-int8", "st-openvino",
           "torch")


@dataclass(frozen=True)
class GridOptions:
    work: Path = Path(".bench/retrieval")   # exports and the peers' folders (shared with it)
    model: Path | None = None               # a sentence-transformers folder (MiniLM-L6)
    batches: tuple[int, ...] = BATCHES
    lengths: tuple[int, ...] = LENGTHS
    rounds: int = 5
    warmup: int = 1
    texts: int = 256                        # prose sentences for the accuracy columns
    threads: int | None = None
    engines: tuple[str, ...] = ENGINES
    precisions: tuple[str, ...] = ("none", "int8")   # bertonnx's exports (--quantize)

    def __post_init__(self):
        for name in ("rounds", "texts"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be ≥ 1, got {getattr(self, name)}",
                                 f"pass a positive --{name}")
        if not self.batches or not self.lengths or min(self.batches + self.lengths) < 1:
            raise InputError("batches and lengths must be positive integers",
                             "pass e.g. --batches 1,8,32 --lengths 16,128,512")
        unknown = set(self.engines) - set(ENGINES)
        if unknown:
            raise InputError(f"unknown engine: {', '.join(sorted(unknown))}",
                             f"engines: {', '.join(ENGINES)}")


QUICK = dict(batches=(1, 4), lengths=(8, 16), rounds=2, warmup=0, texts=8)


@dataclass
class Forward:
    """One engine's forward: (ids, mask) int64 (B, T) -> hidden states (B, T, H) float32."""

    name: str
    precision: str
    run: Callable[[np.ndarray, np.ndarray], np.ndarray]


# -- the engines ---------------------------------------------------------------------------

def _feeds(ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Every engine's inputs; token types all 0 (one segment). An engine drops what its graph
    does not declare."""
    return dict(zip(INPUT_NAMES, (ids, mask, np.zeros_like(ids))))


def bertonnx_forward(folder: Path, threads: int) -> Forward:
    pipe = load(folder, threads=threads)
    session = pipe.session

    def run(ids, mask):
        return session.run(_feeds(ids, mask), ("last_hidden_state",))["last_hidden_state"]

    return Forward(*bertonnx_label(pipe), run)


def st_onnx_forwards(source: Path, work: Path, keys, threads: int, say
                     ) -> tuple[list[Forward], list[peers.Skipped]]:
    """sentence-transformers' ONNX files of `source`, each in an onnxruntime session with
    onnxruntime's default options (runtime/core/session.py's factory, as every bench session)."""
    keys = [k for k in ("st-onnx", "st-onnx-o3", "st-onnx-int8") if k in keys]
    if not keys:
        return [], []
    if (why := peers._missing("sentence_transformers") or peers._missing("optimum.onnxruntime")):
        return [], [peers.Skipped(f"{peers.ST} ONNX", why)]
    folder = peers.st_artifacts("embed", source, work, {"onnx"}, say)["onnx"] / "onnx"
    found = []
    for key in keys:
        label, _, file_name, precision = peers.ST_VARIANTS[key]
        session = create_session(folder / file_name, threads=threads)
        found.append(Forward(f"{peers.ST} {label}", precision, lambda ids, mask, s=session: s.run(
            _feeds(ids, mask), s.output_names[:1])[s.output_names[0]]))
    return found, []


def openvino_forward(source: Path, work: Path, threads: int, say
                     ) -> tuple[list[Forward], list[peers.Skipped]]:
    if (why := peers._missing("openvino") or peers._missing("optimum.intel")
            or peers._missing("sentence_transformers")):
        return [], [peers.Skipped("OpenVINO", why)]
    import openvino as ov  # bench-only dependency

    folder = peers.st_artifacts("embed", source, work, {"openvino"}, say)["openvino"]
    compiled = ov.Core().compile_model(str(folder / "openvino" / "openvino_model.xml"), "CPU",
                                       {"INFERENCE_NUM_THREADS": threads})
    names = {p.get_any_name() for p in compiled.inputs}
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    hint = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)

    def run(ids, mask):
        return compiled({k: v for k, v in _feeds(ids, mask).items() if k in names})[0]

    return [Forward("OpenVINO", f"{hint} (OpenVINO's default here)", run)], []


def ctranslate2_forwards(source: Path, work: Path, threads: int, say
                         ) -> tuple[list[Forward], list[peers.Skipped]]:
    if (why := peers._missing("ctranslate2")):
        return [], [peers.Skipped("CTranslate2", why)]
    import ctranslate2  # bench-only dependency

    found = []
    for quant, precision in (("float32", "fp32"), ("int8", "int8")):
        encoder = ctranslate2.Encoder(str(peers.ct2_model(source, work, quant, say)),
                                      device="cpu", intra_threads=threads)

        def run(ids, mask, encoder=encoder):
            lens = mask.sum(1)
            rows = [r[:n].tolist() for r, n in zip(ids, lens)]   # its input: unpadded ids
            return np.asarray(encoder.forward_batch(rows).last_hidden_state)

        found.append(Forward(f"CTranslate2 {quant}", precision, run))
    return found, []


def torch_forward(source: Path, threads: int) -> Forward:
    import torch  # the reference: bench-only here
    import transformers

    model = transformers.AutoModel.from_pretrained(str(source)).eval()
    best_torch_threads(model, threads, model.config.vocab_size)

    def run(ids, mask):
        with torch.inference_mode():
            return model(input_ids=torch.from_numpy(ids),
                         attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()

    return Forward("transformers (torch)", "fp32", run)


def forwards(source: Path, options: GridOptions, work: Path, say
             ) -> tuple[list[Forward], list[peers.Skipped]]:
    threads = options.threads or cores()
    chosen, found, skipped = set(options.engines), [], []
    if "bertonnx" in chosen:
        found += [bertonnx_forward(bertonnx_export("embed", source, work, q, False, say), threads)
                  for q in options.precisions]
    if "ctranslate2" in chosen:
        f, s = ctranslate2_forwards(source, work, threads, say)
        found, skipped = found + f, skipped + s
    f, s = st_onnx_forwards(source, work, chosen, threads, say)
    found, skipped = found + f, skipped + s
    if "st-openvino" in chosen:
        f, s = openvino_forward(source, work, threads, say)
        found, skipped = found + f, skipped + s
    if "torch" in chosen:
        found.append(torch_forward(source, threads))
    return found, skipped


# -- accuracy and the grid -----------------------------------------------------------------

def prose_batch(backend, n: int, max_len: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """`n` held-out prose sentences as (ids, mask), padded to the longest, cut at `max_len`
    (`backend`: the model's `tokenizers.Tokenizer`; its padding and truncation are set here)."""
    backend.no_padding()
    backend.enable_truncation(max_len)
    encs = backend.encode_batch(prose_sentences(n))
    width = max(len(e.ids) for e in encs)
    ids = np.zeros((n, width), np.int64)
    mask = np.zeros((n, width), np.int64)
    for row, e in enumerate(encs):
        ids[row, :len(e.ids)], mask[row, :len(e.ids)] = e.ids, 1
    return ids, mask


def mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the mask's tokens, unit length. `hidden` may be narrower than `mask` (an
    engine that pads a batch only to its own longest row: CTranslate2)."""
    m = mask[:, :hidden.shape[1], None].astype(np.float32)
    v = (hidden * m).sum(1) / m.sum(1)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def accuracy(found: list[Forward], ids, mask, reference: str) -> dict[str, dict]:
    """Per engine: mean and worst cosine of its pooled sentences to `reference`'s (8 a call)."""
    pooled = {}
    for f in found:
        parts = [mean_pooled(f.run(ids[i:i + 8], mask[i:i + 8]), mask[i:i + 8])
                 for i in range(0, len(ids), 8)]
        pooled[f.name] = np.concatenate(parts)
    ref = pooled[reference]
    return {name: {"cosine_mean": float((v * ref).sum(1).mean()),
                   "cosine_min": float((v * ref).sum(1).min())} for name, v in pooled.items()}


def grid(options: GridOptions, say: Callable[[str], None] = lambda m: None) -> dict:
    """Every cell of batches × lengths, every engine round-robin in it (order rotated per
    round); then the accuracy columns. Returns the machine facts, the cells and accuracy."""
    from bertonnx.runtime.core.defaults import checkpoint_dir  # the MiniLM folder

    work = options.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    source = Path(options.model) if options.model else checkpoint_dir()
    machine = machine_info(options.threads or cores())
    machine["versions"].update(peer_versions())
    found, skipped = forwards(source, options, work, say)
    backend = load_tokenizer(source).backend
    ids, mask = prose_batch(backend, options.texts)
    reference = next((f.name for f in found if f.name == "transformers (torch)"), found[0].name)
    say(f"accuracy on {options.texts} prose sentences, cosine to {reference}")
    agree = accuracy(found, ids, mask, reference)   # first: a broken engine fails in seconds
    vocab = backend.get_vocab_size()
    cells = []
    for batch in options.batches:
        for length in options.lengths:
            feeds = random_feeds(batch, length, vocab)
            ids, mask = feeds["input_ids"], feeds["attention_mask"]
            say(f"b{batch} × s{length}: {len(found)} engines × {options.rounds} rounds")
            times = round_robin({f.name: (lambda f=f: f.run(ids, mask)) for f in found},
                                options.rounds, options.warmup, rotate=True)
            cells.append({"batch": batch, "length": length,
                          "ms": {name: {k: (v * 1000 if k != "n" else v)
                                        for k, v in stats(t).items()}
                                 | {"max": 1000 * max(t)} for name, t in times.items()}})
            gc.collect()
    return {"machine": machine | {"load_avg_end": load_avg()},
            "options": {k: str(v) if isinstance(v, Path) else v
                        for k, v in asdict(options).items()},
            "model": str(source), "engines": {f.name: f.precision for f in found},
            "skipped": [asdict(s) for s in skipped], "cells": cells,
            "accuracy": agree, "reference": reference,
            "prose_tokens": int(mask.sum())}


if __name__ == "__main__":  # `python -m bertonnx.bench.grid`: its flags live in commands.py
    from bertonnx.runtime.cli.main import run_click

    from .commands import grid_command

    sys.exit(run_click(grid_command, prog_name="python -m bertonnx.bench.grid"))
