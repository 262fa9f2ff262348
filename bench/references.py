"""Where the multi-vector references live and how to run them from here: PyLate and
FlagEmbedding (and sentence-transformers 6) each in a small environment of its own under the
test cache, made by `python -m tests.references` (tests/references.py says why), which reads
the caller's packages after its own. bench.colbert_peers and bench.m3_peers run them; the
bench and the tests keep FlagEmbedding's outputs the same way (flagembedding_arrays).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np

# the caller's site-packages, which a references' environment reads after its own (its .pth)
SUITE_SITE = "BERTONNX_SUITE_SITE"


def cache() -> Path:
    return Path(os.environ.get("BERTONNX_TEST_CACHE") or "~/.cache/bertonnx-tests").expanduser()


def python(name: str = "references") -> Path:
    """The interpreter of the references' environment `name` (it may not be made)."""
    return cache() / name / "bin" / "python"


def env() -> dict:
    """The environment to run a reference in from this interpreter: several checkouts (CI
    clones, worktrees) share the cache, and each runs the references against its own bertonnx."""
    return {**os.environ, SUITE_SITE: sysconfig.get_paths()["purelib"]}


def peers_parser(module: str, out: str) -> argparse.ArgumentParser:
    """The options every peers' bench takes; `--reference` (hidden) is its run in the
    references' environment."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--documents", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--engines", default="cpu,auto")
    parser.add_argument("--streams", default="1",
                        help="streams each engine runs with, a comma list (1, 2, auto)")
    parser.add_argument("--quantize", default="none",
                        help="bertonnx's exports, a comma list (none, int8): each runs on "
                             "each engine")
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    return parser


def export_folder(out: Path, quantize: str) -> Path:
    """Where a peers' bench keeps bertonnx's export of one precision (`--quantize`)."""
    return out / ("export" if quantize == "none" else f"export-{quantize}")


def bertonnx_loads(engines: str, streams: str, quantize: str) -> dict[str, tuple]:
    """Each export × engine × streams of the options, by the row's name: (the export's folder
    under --out, `load`'s keywords); "auto" streams load as a bulk job does (`bulk`)."""
    out = {}
    for q in quantize.split(","):
        for e in engines.split(","):
            for s in streams.split(","):
                n = s if s == "auto" else int(s)
                name = (e if q == "none" else f"{q} {e}") + ("" if n == 1 else f", streams {n}")
                out[name] = (q, {"providers": e, "streams": n, "bulk": n == "auto"})
    return out


def run(module: str, *args: str) -> None:
    """`python -m module args` in the references' environment (it reads this bertonnx); exits
    in one line when the environment is not made."""
    reference = python()
    if not reference.is_file():
        sys.exit(f"no references' environment at {reference}: run python -m tests.references")
    subprocess.run([str(reference), "-m", module, *args], check=True, env=env())


def flagembedding_arrays(got: dict) -> dict[str, np.ndarray]:
    """BGEM3FlagModel.encode's three outputs as arrays to keep (np.savez): dense (N, H);
    colbert<i>; sparse_ids<i> / sparse_values<i>, each lexical_weights dict by id ascending."""
    arrays = {"dense": np.asarray(got["dense_vecs"], np.float32)}
    for i, (weights, vecs) in enumerate(zip(got["lexical_weights"], got["colbert_vecs"])):
        ids = sorted(int(k) for k in weights)
        arrays[f"sparse_ids{i}"] = np.array(ids, np.int64)
        arrays[f"sparse_values{i}"] = np.array([weights[str(k)] for k in ids], np.float32)
        arrays[f"colbert{i}"] = np.asarray(vecs, np.float32)
    return arrays
