"""Reliability helpers: the CLI in a subprocess, the one-error-line check, and the live servers
the test_server_* modules share.

The tiny models are tests/conftest.py's: `tiny_export(task)` (64 positions, so windowing and
truncation are reached by short texts), `tiny_checkpoint(task, seed)`, `ours(task)`.
`run_cli(*args)` -> CompletedProcess of `python -m bertonnx.runtime.cli ARGS` in a subprocess.
`limits_server`, `timeouts_server`, `qa_server`, `ner_server`, `emb_server`: a live `bertonnx
serve` per flag set (_live.py's), one per test module that asks for it, killed at its end.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import EMB, FM, NER, QA, make_checkpoint
from tests.live_server import serve_argv

from ._live import LIMITS_FLAGS, QA_FLAGS, TIMEOUT_FLAGS, serving


HIDDEN = 32  # tests/conftest.py make_checkpoint's hidden size


def _cli_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.fixture(scope="session")
def run_cli():
    def run(*args, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", *map(str, args)],
                              input=input, capture_output=True, timeout=timeout, env=_cli_env())

    return run


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed command; fails the test on a traceback or more lines."""
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err}"
    assert lines[0].startswith("bertonnx: error: "), lines[0]
    return lines[0]


# -- live servers, one per flag set (the test_server_* modules) ------------------------------

@pytest.fixture(scope="module")
def limits_server(tiny_export):
    yield from serving(serve_argv(tiny_export(FM), *LIMITS_FLAGS))


@pytest.fixture(scope="module")
def timeouts_server(tiny_export):
    yield from serving(serve_argv(tiny_export(FM), *TIMEOUT_FLAGS))


@pytest.fixture(scope="module")
def qa_export(tmp_path_factory):
    # torch (the export) only when this fixture runs, not whenever this conftest is read
    from bertonnx.export import ExportOptions, export_model

    root = tmp_path_factory.mktemp("qa-wide-vocab")
    ckpt = make_checkpoint(root / "ckpt", QA, vocab=30_522)
    export_model(ckpt, QA, root / "export", ExportOptions(parity=False))
    return root / "export"


@pytest.fixture(scope="module")
def qa_server(qa_export):
    yield from serving(serve_argv(qa_export, *QA_FLAGS))


@pytest.fixture(scope="module")
def ner_server(tiny_export):
    yield from serving(serve_argv(tiny_export(NER)))


@pytest.fixture(scope="module")
def emb_server(tiny_export):
    yield from serving(serve_argv(tiny_export(EMB)))
