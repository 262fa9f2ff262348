"""runtime/core/blas.py: a session made leaves numpy's BLAS at one thread, unless the
environment chose its threads. Each case runs in a fresh process (the limit is set once per
process, and the suite's own process has made sessions long before)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bertonnx.runtime.core.blas import USER_SETTINGS
from tests.runtime.core.test_session import residual_norm_graph

pytest.importorskip("onnx")

PROBE = """
import json, sys
import numpy
from threadpoolctl import threadpool_info
from bertonnx.runtime.core.session import create_session
before = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
create_session(sys.argv[1], threads=2)
after = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({"before": before, "after": after}))
"""


def blas_threads(graph, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS}
    done = subprocess.run([sys.executable, "-c", PROBE, str(graph)], env={**clean, **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_session_leaves_numpys_blas_one_thread(tmp_path):
    residual_norm_graph(tmp_path / "g.onnx")
    got = blas_threads(tmp_path / "g.onnx")
    assert got["before"], "numpy loaded no BLAS library threadpoolctl knows"
    if max(got["before"]) == 1:
        pytest.skip("a one-core machine: numpy's BLAS has one thread already")
    assert got["after"] == [1] * len(got["before"])


def test_threads_the_environment_chose_are_kept(tmp_path):
    residual_norm_graph(tmp_path / "g.onnx")
    got = blas_threads(tmp_path / "g.onnx", OPENBLAS_NUM_THREADS="2")
    assert got["before"] == got["after"] == [2] * len(got["before"])
