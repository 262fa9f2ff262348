"""runtime/core/pages.py: the graph files' pages an OpenVINO session no longer holds."""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import pages
from bertonnx.runtime.core.contract import BF16_MIN_MEAN_COSINE, FP32_ATOL

from tests.conftest import EMB
from tests.runtime._engines import BF16, NO_BF16, NO_OPENVINO, OPENVINO

SMAPS = Path("/proc/self/smaps")
pytestmark = pytest.mark.skipif(not SMAPS.is_file(), reason="no /proc/self/smaps (not Linux)")
TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris " * 4, "paris"]


def mappings(prefix: Path) -> dict[str, int]:
    """This process's mappings of the files whose path starts with `prefix`: resident kB by
    address range."""
    prefix, out, inside = os.path.realpath(prefix), {}, None
    for line in SMAPS.read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            inside = head[0] if len(head) == 6 and head[5].startswith(prefix) else None
        elif inside and line.startswith("Rss:"):
            out[inside] = int(line.split()[1])
    return out


def resident_kb(prefix: Path) -> int:
    return sum(mappings(prefix).values())


def test_release_drops_a_files_pages_and_keeps_its_bytes(tmp_path):
    data = tmp_path / "model.onnx.data"
    data.write_bytes(os.urandom(4 << 20))
    with open(data, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        whole = bytes(m)                                  # read: every page resident
        assert resident_kb(data) >= 4000
        assert pages.release(tmp_path / "model.onnx") >= 4 << 20
        assert resident_kb(data) == 0
        assert bytes(m) == whole                          # read again, from the file
    assert pages.release(tmp_path / "other.onnx") == 0    # nothing of it mapped


@pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
@pytest.mark.parametrize("precision", [
    "f32", pytest.param("bf16", marks=pytest.mark.skipif(not BF16, reason=NO_BF16))])
def test_an_openvino_session_holds_none_of_the_graph_files_pages(tiny_export, precision):
    """OpenVINO compiled its own weights: the new session's pages of the graph files are let go
    at load (other sessions of the suite may map them too), and it answers as before."""
    folder = tiny_export(EMB)
    before = mappings(folder / "model.onnx")
    pipe = load(folder, providers=f"openvino:{precision}")
    new = {k: v for k, v in mappings(folder / "model.onnx").items() if k not in before}
    assert new and sum(new.values()) == 0
    got = np.asarray(pipe(TEXTS))
    want = np.asarray(load(folder, providers="cpu")(TEXTS))
    if precision == "f32":
        np.testing.assert_allclose(got, want, atol=FP32_ATOL)
    else:   # bf16 arithmetic: its gate, the cosine (unit vectors)
        assert (got * want).sum(1).min() >= BF16_MIN_MEAN_COSINE
