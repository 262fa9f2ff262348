"""Fixtures the export tests share.

`minilm_int8` (session): all-MiniLM-L6-v2's sentence-embedding int8 export as users get it —
this CPU's recipe row, parity on, NNCF's OpenVINO graph beside it where nncf is installed —
made once (about 20 s on 2 cores) for test_openvino_int8.py's held-out prose and
test_int8_accuracy.py's recipe of this CPU. Mark tests using it `@pytest.mark.slow`.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bertonnx.runtime.core.manifest import Manifest


@pytest.fixture(scope="session")
def minilm_int8(minilm_dir, tmp_path_factory) -> tuple[Path, Manifest]:
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    out = tmp_path_factory.mktemp("minilm-int8") / "q"
    return out, export_model(minilm_dir, "feature-extraction", out,
                             ExportOptions(quantize="int8"))
