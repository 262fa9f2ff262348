"""runtime/atomic.py: the one build-beside-then-rename writer (exports, Triton entries,
training checkpoints)."""
from __future__ import annotations

from bertonnx.runtime.atomic import replace_folder


def _folder(path, text):
    path.mkdir()
    (path / "f.txt").write_text(text)
    return path


def test_replace_folder_installs_new_and_removes_old(tmp_path):
    target = tmp_path / "out"
    replace_folder(_folder(tmp_path / ".out.partial-1", "first"), target)
    assert (target / "f.txt").read_text() == "first"
    replace_folder(_folder(tmp_path / ".out.partial-2", "second"), target)
    assert (target / "f.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing left aside
