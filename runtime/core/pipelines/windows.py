"""The windows of long inputs, as `Pipeline.encode_windows` gives them to QA and NER."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Windows:
    """Every window of every input, inputs in order: a long input becomes several overlapping
    windows (the tokenizers library's overflow), each knowing its input and its place."""

    encodings: list          # (W,) tokenizers Encodings
    owner: np.ndarray        # (W,) index of the input each window belongs to
    part: np.ndarray         # (W,) the window's place in its input (0 = first)
    n_inputs: int

    @classmethod
    def of(cls, encodings: list) -> "Windows":
        """The windows of encodings made with overflow (`[e, *e.overflowing]` each)."""
        windows, owner, part = [], [], []
        for i, e in enumerate(encodings):
            for j, w in enumerate([e, *e.overflowing]):
                windows.append(w)
                owner.append(i)
                part.append(j)
        return cls(windows, np.asarray(owner, dtype=np.int64), np.asarray(part, dtype=np.int64),
                   len(encodings))

    def per_input(self, values: list) -> list[list]:
        """Per-window values grouped by input: one list per input, windows in order."""
        bounds = np.searchsorted(self.owner, np.arange(self.n_inputs + 1))
        return [values[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
