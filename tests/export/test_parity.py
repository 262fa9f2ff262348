"""export/parity.py: what the bf16 gate compares."""
from __future__ import annotations

import numpy as np

from bertonnx.export.parity import _cosine_rows


def _cosines(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    x, y = _cosine_rows(ref), _cosine_rows(got)
    return (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)


def test_one_score_a_row_is_judged_as_one_vector():
    """A reranker's (B, 1) scores: one row's cosine would be its sign alone."""
    ref = np.array([[0.31], [-0.52], [0.0004], [1.2]])
    near = ref + np.array([[2e-4], [-3e-4], [-8e-4], [1e-4]])  # bf16-sized, one sign flipped
    assert _cosine_rows(ref).shape == (1, 4)
    assert _cosines(ref, near).min() > 0.9999                  # per row: -1
    far = ref.copy()
    far[0] = 0.6                                               # its sign kept
    assert _cosines(ref, far).min() < 0.99                     # per row: 1


def test_rows_of_several_values_stay_rows():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(2, 3, 4))
    assert _cosine_rows(ref).shape == (6, 4)
    got = ref.copy()
    got[1, 2] *= -1                                            # one row turned round
    cos = _cosines(ref, got)
    assert np.isclose(cos[5], -1) and np.allclose(cos[:5], 1)
