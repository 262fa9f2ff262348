"""Multi-vector test helpers: PyLate's tiny ColBERT folders and its outputs on them (made once a
session by tests/colbert_reference.py in the references' environment), and their exports."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.colbert_reference import CASES
from tests.references import REFERENCES



@pytest.fixture(scope="session")
def colbert_references(tmp_path_factory) -> Path:
    """The folder tests/colbert_reference.py wrote (a ColBERT folder and an .npz per case)."""
    return REFERENCES.write("tests.colbert_reference",
                            tmp_path_factory.mktemp("colbert-references"))


@pytest.fixture(scope="session")
def colbert_export(colbert_references, tmp_path_factory):
    """colbert_export(case) -> the export folder of PyLate's `case` folder (made once)."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    root = tmp_path_factory.mktemp("colbert-exports")
    made: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in made:
            assert case in CASES
            export_model(colbert_references / case, "multi-vector", root / case,
                         ExportOptions(parity=False))
            made[case] = root / case
        return made[case]

    return get


def reference_outputs(references: Path, case: str) -> dict[str, np.ndarray]:
    with np.load(references / f"{case}.npz") as data:
        return {k: data[k] for k in data.files}
