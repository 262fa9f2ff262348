"""Table-driven bad inputs and bad artifacts, each through the CLI and the library.

Every row of the table (_bad_cases.py) is one user mistake. Through the CLI (a real subprocess)
it must exit with the row's code and print exactly one stderr line starting "bertonnx:
error:", no traceback; through the library it must raise the row's `BertOnnxError` subclass
with a one-line message. Both are matched against the row's pattern, so a row cannot pass on an
unrelated error. Odd but valid files (BOM, CRLF) must read like clean ones.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.runtime import BertOnnxError, load

from tests.conftest import FM

from ._bad_cases import CASES, DAMAGE, FILES, Case
from .conftest import _cli_env, one_error_line


@pytest.fixture(scope="session")
def case_folder(tiny_export, tmp_path_factory):
    """The export a row runs against: the task's own, or a damaged copy of it (made once)."""
    root = tmp_path_factory.mktemp("damaged")
    made: dict[tuple, Path] = {}

    def get(case: Case) -> Path:
        src = tiny_export(case.task)
        if case.damage is None:
            return src
        key = (case.task, case.damage)
        if key not in made:
            d = root / case.damage / "export"
            shutil.copytree(src, d)
            DAMAGE[case.damage](d)
            made[key] = d
        return made[key]

    return get


@pytest.fixture(scope="session")
def input_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    for name, data in FILES.items():
        (root / name).write_bytes(data)
    return lambda name: root / name


def _argv(case: Case, folder: Path, file) -> list[str]:
    return [re.sub(r"\{f:([^}]+)\}", lambda m: str(file(m.group(1))),
                   a.replace("{dir}", str(folder))) for a in case.argv]


CLI_CASES = [c for c in CASES if c.argv is not None]
LIB_CASES = [c for c in CASES if c.lib is not None]


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli(case, case_folder, input_files, run_cli):
    proc = run_cli(*_argv(case, case_folder(case), input_files))
    line = one_error_line(proc)
    assert proc.returncode == case.code, (proc.returncode, line)
    assert re.search(case.match, line), line
    assert proc.stdout == b"", proc.stdout[:200]


@pytest.mark.parametrize("case", LIB_CASES, ids=[c.id for c in LIB_CASES])
def test_library(case, case_folder, input_files):
    with pytest.raises(BertOnnxError) as info:
        case.lib(case_folder(case), input_files)
    err = info.value
    assert type(err) is case.error, f"{type(err).__name__}: {err}"
    assert re.search(case.match, str(err)), str(err)
    assert "\n" not in str(err) and err.exit_code == case.code


def test_table_covers_the_issue():
    """The issue's list of mistakes is in the table, so a refactor cannot drop one silently."""
    ids = {c.id for c in CASES}
    required = {"missing-folder", "artifact-empty", "artifact-truncated-model",
                "artifact-foreign-model", "artifact-sha-corrupted", "artifact-newer-version",
                "artifact-path-escape", "task-mismatch", "file-latin1", "file-blank-bom-crlf",
                "empty-text", "whitespace-text", "no-mask-token", "qa-question-too-long",
                "top-k-zero", "file-surrogate-json"}
    assert required <= ids, required - ids
    assert set(DAMAGE) == {c.damage for c in CASES if c.damage}, "unused damage"


# -- odd but valid files give the same answers as clean ones -------------------------------

VALID_FILES = {
    "clean.txt": b"the [MASK] sat .\nparis is a [MASK] .\n",
    "bom-crlf.txt": b"\xef\xbb\xbfthe [MASK] sat .\r\n\r\nparis is a [MASK] .\r\n",
    "crlf.jsonl": b'{"text": "the [MASK] sat ."}\r\n"paris is a [MASK] ."\r\n',
    "bom.jsonl": b'\xef\xbb\xbf{"text": "the [MASK] sat ."}\n{"text": "paris is a [MASK] ."}\n',
}


def test_bom_and_crlf_files_read_like_clean_ones(tiny_export, tmp_path, run_cli):
    folder = tiny_export(FM)
    outputs = {}
    for name, data in VALID_FILES.items():
        (tmp_path / name).write_bytes(data)
        proc = run_cli("fill-mask", folder, "--json", "--input", tmp_path / name)
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"Traceback" not in proc.stderr
        outputs[name] = json.loads(proc.stdout)
    clean = outputs.pop("clean.txt")
    assert len(clean) == 2 and clean[0][0]["sequence"].startswith("the ")
    for name, got in outputs.items():
        assert got == clean, name
    # and the library, on the same texts, agrees with the CLI
    assert load(folder)(["the [MASK] sat .", "paris is a [MASK] ."]) == clean


def test_closed_stdin_is_one_line(tiny_export):
    """`--input -` in a process started with file descriptor 0 closed (`cmd 0<&-`): Python
    then has no sys.stdin at all."""
    proc = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "fill-mask",
                           str(tiny_export(FM)), "--input", "-"], capture_output=True,
                          timeout=120, env=_cli_env(), preexec_fn=lambda: os.close(0))
    line = one_error_line(proc)
    assert proc.returncode == 2 and "standard input is closed" in line, line
