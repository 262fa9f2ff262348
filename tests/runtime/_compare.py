"""Structural comparison of pipeline outputs: strings and ints equal, floats within atol."""
from __future__ import annotations

import numbers

import numpy as np

ATOL = 1e-4  # the bar: scores within 1e-4 of transformers on the same checkpoint


def assert_same(ours, theirs, atol: float = ATOL, where: str = "result") -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{where}: {type(ours).__name__} vs dict"
        assert set(ours) == set(theirs), f"{where}: keys {sorted(ours)} vs {sorted(theirs)}"
        for k in theirs:
            assert_same(ours[k], theirs[k], atol, f"{where}[{k!r}]")
    elif isinstance(theirs, (list, tuple, np.ndarray)) and not np.isscalar(theirs):
        assert isinstance(ours, (list, tuple, np.ndarray)), f"{where}: {type(ours).__name__}"
        assert len(ours) == len(theirs), f"{where}: {len(ours)} items vs {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, atol, f"{where}[{i}]")
    elif isinstance(theirs, str) or isinstance(theirs, (bool, np.bool_)):
        assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"
    elif isinstance(theirs, numbers.Integral):
        assert isinstance(ours, int) and ours == int(theirs), f"{where}: {ours!r} vs {theirs!r}"
    elif isinstance(theirs, numbers.Real):
        assert isinstance(ours, float), f"{where}: {type(ours).__name__} is not a float"
        assert abs(ours - float(theirs)) <= atol, f"{where}: {ours} vs {float(theirs)}"
    else:
        assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"
