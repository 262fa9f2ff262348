"""runtime/core/atomic.py: the one build-beside-then-rename writer, and its publishers' use of it.

The helper on its own (folders, files, keep-existing, scratch of killed writers), then
publishers killed part-way with SIGKILL, when no cleanup can run: the generic block, a Triton
repository entry, a copy Ray makes on a node. Afterwards the target does not exist, only the
hidden scratch does, and the next publish to the same target completes and removes it. (An
export killed part-way: tests/reliability/test_interrupt.py; a bulk job: tests/runtime/bulk.)
Last, no module outside atomic.py renames anything.
"""
from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertonnx.runtime.core.atomic import (discard, install, publishing, scratch_beside,
                                          write_file)

from tests.conftest import CLS

REPO = Path(__file__).resolve().parents[3]


def _folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "f.txt").write_text(text)
    return path


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- the helper -------------------------------------------------------------------------------

def test_install_replaces_a_folder_and_leaves_nothing_aside(tmp_path):
    target = tmp_path / "out"
    assert install(_folder(tmp_path / ".out.partial-1", "first"), target)
    assert (target / "f.txt").read_text() == "first"
    assert install(_folder(tmp_path / ".out.partial-2", "second"), target)
    assert (target / "f.txt").read_text() == "second"
    assert _names(tmp_path) == ["out"]  # nothing left aside


def test_install_replaces_a_file_in_one_rename(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("old")
    scratch = tmp_path / "out.jsonl.partial"
    scratch.mkdir()
    (scratch / "data.jsonl").write_text("new")
    assert install(scratch / "data.jsonl", target, durable=True)
    assert target.read_text() == "new" and not (scratch / "data.jsonl").exists()


def test_keep_existing_keeps_the_first_folder_renamed_in(tmp_path):
    target = tmp_path / "copy"
    assert install(_folder(tmp_path / ".a", "first"), target, keep_existing=True)
    assert not install(_folder(tmp_path / ".b", "second"), target, keep_existing=True)
    assert (target / "f.txt").read_text() == "first" and (tmp_path / ".b").is_dir()
    with publishing(target, keep_existing=True) as tmp:
        (tmp / "f.txt").write_text("third")
    assert (target / "f.txt").read_text() == "first" and _names(tmp_path) == [".b", "copy"]


def test_discard_removes_a_folder(tmp_path):
    discard(_folder(tmp_path / "damaged", "x"))
    assert _names(tmp_path) == []


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failed_publish_leaves_the_old_target_and_no_scratch(tmp_path, error):
    target = tmp_path / "out"
    with publishing(target) as tmp:
        (tmp / "f.txt").write_text("first")
    with pytest.raises(error):
        with publishing(target) as tmp:
            (tmp / "f.txt").write_text("second")
            raise error()
    assert (target / "f.txt").read_text() == "first" and _names(tmp_path) == ["out"]


def test_publishing_removes_the_scratch_of_dead_writers_only(tmp_path):
    target = tmp_path / "out"
    dead = tmp_path / f".out.partial-{_dead_pid()}-0badc0de"
    live = scratch_beside(target)  # this process's: a writer still at work
    for p in (dead, live, tmp_path / ".other.partial-1-00000000"):
        p.mkdir()
    with publishing(target) as tmp:
        assert tmp.name.startswith(f".out.partial-{os.getpid()}-")
    assert _names(tmp_path) == sorted([live.name, ".other.partial-1-00000000", "out"])


def test_write_file_replaces_whole(tmp_path):
    path = tmp_path / "commit.json"
    write_file(path, b"one")
    write_file(path, b"two")
    assert path.read_bytes() == b"two" and _names(tmp_path) == ["commit.json"]


# -- publishers killed part-way --------------------------------------------------------------

_PAUSE = """
import dataclasses, pathlib, sys, time
flag, point, arg, out = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), \\
    pathlib.Path(sys.argv[4])

def pause(*a, **k):  # inside the publish: the scratch holds part of the target
    flag.write_text(point)
    while True:
        time.sleep(60)

if point == "block":
    from bertonnx.runtime.core.atomic import publishing
    with publishing(out) as tmp:
        (tmp / "half.txt").write_text("half")
        pause()
elif point == "triton":  # the model files copied, config.pbtxt not written
    from bertonnx.runtime.triton import pipeline_repository, repository
    pipeline_repository.pipeline_config = pause  # the default: the Python-backend model
    repository.write_repository(arg, out.parent, repository.TritonOptions(name=out.name))
elif point == "ray":  # the first file written, the others not
    from bertonnx.runtime.bulk.ray import materialise, ship
    shipped = dataclasses.replace(ship(arg, put=lambda b: b), path=str(out.parent / "gone"))
    got = []
    def get(part):
        got.append(part)
        return part if len(got) == 1 else pause()
    materialise(shipped, out.parent, get=get)
"""


def _kill_mid_publish(point: str, arg: Path, out: Path) -> None:
    flag = out.parent.parent / f"paused-{point}"
    proc = subprocess.Popen([sys.executable, "-c", _PAUSE, str(flag), point, str(arg), str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while not flag.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "never paused"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _publish_again(point: str, arg: Path, out: Path) -> None:
    if point == "block":
        with publishing(out) as tmp:
            (tmp / "whole.txt").write_text("whole")
    elif point == "triton":
        from bertonnx.runtime.triton import TritonOptions, write_repository

        write_repository(arg, out.parent, TritonOptions(name=out.name))
    else:
        from bertonnx.runtime.bulk.ray import materialise, ship

        shipped = ship(arg, put=lambda b: b)
        shipped = dataclasses.replace(shipped, path=str(out.parent / "gone"))
        assert materialise(shipped, out.parent, get=lambda b: b) == out


@pytest.mark.parametrize("point", ["block", "triton", "ray"])
def test_a_killed_publish_leaves_only_scratch_which_the_next_removes(tiny_export, tmp_path,
                                                                     point):
    from bertonnx.runtime.bulk.ray import fingerprint

    export = tiny_export(CLS)
    parent = tmp_path / "parent"
    parent.mkdir()
    out = parent / (fingerprint(export) if point == "ray" else "m")
    _kill_mid_publish(point, export, out)
    assert not out.exists(), "a killed publish left a target"
    left = _names(parent)
    assert len(left) == 1 and left[0].startswith(f".{out.name}.partial-"), left
    assert any(p.is_file() for p in (parent / left[0]).rglob("*")), "paused before any write"
    _publish_again(point, export, out)
    assert _names(parent) == [out.name], "the next publish left the killed one's scratch"
    if point == "triton":
        assert (out / "config.pbtxt").is_file()
    if point == "ray":
        assert fingerprint(out) == fingerprint(export)


# -- nothing else renames ---------------------------------------------------------------------

RENAMES = re.compile(r"\bos\.(replace|rename|renames)\(|\bshutil\.move\(|\.rename\(")
ALLOWED = {"runtime/core/atomic.py"}  # the one place; everything else calls it


def test_only_atomic_renames():
    """Every rename in the packages and scripts is atomic.py's (Path.replace cannot be told
    from str.replace by a pattern; os.replace, os.rename, shutil.move and .rename can)."""
    sources = [p for folder in ("build", "export", "runtime", "bench", "scripts")
               for p in (REPO / folder).rglob("*.py")]
    assert len(sources) > 50
    hits = [f"{p.relative_to(REPO)}:{n}: {line.strip()}" for p in sources
            if p.relative_to(REPO).as_posix() not in ALLOWED
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if RENAMES.search(line.split("#", 1)[0])]
    assert not hits, "\n".join(hits)
