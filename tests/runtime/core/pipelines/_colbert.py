"""Multi-vector test helpers: PyLate's tiny ColBERT folders and its outputs on them (made once a
session by tests/colbert_reference.py in the references' environment), and their exports."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from bertonnx.runtime.core.pipelines.multi_vector import maxsim

from tests.colbert_reference import CASES, DOCUMENTS, QUERIES, STANFORD
from tests.references import REFERENCES

ATOL = 1e-4   # the bound on every token vector and score


@pytest.fixture(scope="session")
def colbert_references(tmp_path_factory) -> Path:
    """The folder tests/colbert_reference.py wrote (a ColBERT folder and an .npz per case)."""
    return REFERENCES.write("tests.colbert_reference",
                            tmp_path_factory.mktemp("colbert-references"))


def exports_of(references: Path, root: Path, cases) -> Callable[[str], Path]:
    """get(case) -> the multi-vector export of the reference folder `case` (made once)."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    made: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in made:
            assert case in cases
            export_model(references / case, "multi-vector", root / case,
                         ExportOptions(parity=False))
            made[case] = root / case
        return made[case]

    return get


@pytest.fixture(scope="session")
def colbert_export(colbert_references, tmp_path_factory):
    """colbert_export(case) -> the export folder of PyLate's `case` folder (made once)."""
    return exports_of(colbert_references, tmp_path_factory.mktemp("colbert-exports"),
                      (*CASES, STANFORD))


def export_json(folder: Path, out: Path, capsys) -> tuple[dict, str]:
    """`bertonnx export FOLDER --out OUT --json` with no --task (the folder says which): its
    manifest and what it said on stderr."""
    from bertonnx.runtime.cli import main

    assert main(["export", str(folder), "--out", str(out), "--json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def reference_outputs(references: Path, case: str) -> dict[str, np.ndarray]:
    with np.load(references / f"{case}.npz") as data:
        return {k: data[k] for k in data.files}


def assert_token_vectors(pipe, ref: dict[str, np.ndarray], case: str) -> None:
    """Each query's and document's token vectors as the reference's (`q{i}`, `d{i}`): the same
    number, each within ATOL, at batch sizes 1 and 3 (rows padded against others of other
    lengths, and alone); each query's MaxSim against the documents as its `scores`."""
    for batch_size in (1, 3):
        for kind, texts, got in (("q", QUERIES, pipe(QUERIES, is_query=True,
                                                      batch_size=batch_size)),
                                 ("d", DOCUMENTS, pipe(DOCUMENTS, batch_size=batch_size))):
            assert len(got) == len(texts)
            for i, vectors in enumerate(got):
                want = ref[f"{kind}{i}"]
                assert vectors.shape == want.shape, (case, kind, i)
                np.testing.assert_allclose(vectors, want, atol=ATOL, rtol=0)
    documents = pipe(DOCUMENTS)
    for row, query in enumerate(pipe(QUERIES, is_query=True)):
        np.testing.assert_allclose(maxsim(query, documents), ref["scores"][row],
                                   atol=ATOL, rtol=0)
