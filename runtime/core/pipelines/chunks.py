"""feature-extraction's long inputs embedded whole (long_inputs="chunk"), not truncated.

A text past the model's length becomes overlapping windows of the model's length (the
tokenizers library's overflow, each window with its own special tokens), each window is pooled
as the model pools a text, and the text's vector is the windows' mean weighted by their token
counts — vLLM's chunked processing (its pooler's `enable_chunked_processing`: MEAN across
chunks, weighted by chunk length), with windows that overlap so no token loses its context at
a cut. The mean is taken before the model's Normalize; the answer is normalized after, where it
is asked to be. A text within the model's length is one window: its vector is the truncating
path's. The server's token limits bound every window's tokens (pipelines' `Work`).
"""
from __future__ import annotations

import numpy as np

from ..postprocess import l2_normalize
from .windows import Windows

# Windows overlap by this share of the model's length (1/8: 64 tokens of 512, 16 of 128).
OVERLAP_DIVISOR = 8


def overlap(max_length: int) -> int:
    return max_length // OVERLAP_DIVISOR


def window_counts(windows: Windows) -> tuple[int, ...]:
    """How many windows each input became (1: it fit the model)."""
    return tuple(np.bincount(windows.owner, minlength=windows.n_inputs).tolist())


def combine(windows: Windows, vectors: list[np.ndarray], normalize: bool) -> list[np.ndarray]:
    """Each input's vector: its windows' pooled vectors averaged, weighted by each window's
    tokens, then unit length if `normalize`."""
    weights = [len(e.ids) for e in windows.encodings]
    out = []
    for parts, w in zip(windows.per_input(vectors), windows.per_input(weights)):
        w = np.asarray(w, dtype=np.float64)[:, None]
        v = ((w * np.stack(parts)).sum(axis=0) / w.sum()).astype(np.float32)   # (D,)
        out.append(l2_normalize(v) if normalize else v)
    return out
