"""multi-vector against sentence-transformers 6's MultiVectorEncoder itself: tiny random folders
saved by sentence-transformers 6.2 (tests/st6_reference.py, in the references-st6 environment),
exported, and encoded here — the same number of token vectors per text as encode_query /
encode_document and each within 1e-4, for queries ("fixed" and "min" expansion, attended or not,
or none; text prompts; the skiplist on queries) and documents (prompt or none, the skiplist, a
skiplist word the vocabulary lacks leaving [UNK] in, cut at the document length or the model's
maximum), in batches whose rows are padded; MaxSim scores as MultiVectorEncoder.similarity's."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.multi_vector_encoder import read_multi_vector
from bertonnx.runtime.core.pipelines.multi_vector import maxsim

from tests.colbert_reference import DOCUMENTS, QUERIES
from tests.references import ST6, env
from tests.st6_reference import CASES

ATOL = 1e-4
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="session")
def st6_references(tmp_path_factory) -> Path:
    """The folder tests/st6_reference.py wrote (a MultiVectorEncoder folder and an .npz per
    case)."""
    python = ST6.python()
    if python is None:
        pytest.skip("the references-st6 environment is not made (python -m tests.references)")
    out = tmp_path_factory.mktemp("st6-references")
    done = subprocess.run([str(python), "-m", "tests.st6_reference", str(out)], cwd=REPO,
                          capture_output=True, text=True, env=env())
    if done.returncode:
        pytest.fail(f"tests.st6_reference failed:\n{done.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def st6_export(st6_references, tmp_path_factory):
    """st6_export(case) -> the export folder of the `case` MultiVectorEncoder (made once)."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    root = tmp_path_factory.mktemp("st6-exports")
    made: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in made:
            export_model(st6_references / case, "multi-vector", root / case,
                         ExportOptions(parity=False))
            made[case] = root / case
        return made[case]

    return get


def outputs(references: Path, case: str) -> dict[str, np.ndarray]:
    with np.load(references / f"{case}.npz") as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("case", list(CASES))
def test_token_vectors_equal_multi_vector_encoders(case, st6_references, st6_export):
    ref = outputs(st6_references, case)
    pipe = load(st6_export(case))
    for batch_size in (1, 3):   # rows padded against others of other lengths, and alone
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
