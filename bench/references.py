"""Where the multi-vector references live and how to run them from here: PyLate and
FlagEmbedding (and sentence-transformers 6) each in a small environment of its own under the
test cache, made by `python -m tests.references` (tests/references.py says why), which reads
the caller's packages after its own. bench.colbert_peers and bench.m3_peers run them.
"""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path

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
