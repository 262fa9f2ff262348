"""Reliability helpers: the CLI in a subprocess, and the one-error-line check.

The tiny models are tests/conftest.py's: `tiny_export(task)` (64 positions, so windowing and
truncation are reached by short texts), `tiny_checkpoint(task, seed)`, `ours(task)`.
`run_cli(*args)` -> CompletedProcess of `python -m bertonnx.runtime.cli ARGS` in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


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
