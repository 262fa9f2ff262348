"""The one builder of right-padded batches, and the length-sorted micro-batches built with it.

onnxruntime's fused Attention assumes RIGHT padding, and a row's padding must be masked out, so
every batch fed to a BERT graph — by the pipelines, the export's parity and int8 checks, the
training collators and the benchmarks — is built here: rows right-padded to the longest (or to
a given width, longer rows cut), an attention mask of ones over each row's tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from .errors import InputError

# Padded tokens per session call, and the rows a call holds even past them. A call's
# activations should stay in the cache: on AMD Zen 4 (2 threads; `python -m
# bertonnx.bench.batch_caps`, docs/benchmarks-history.md "Micro-batch size") 512 tokens against
# the former
# 2048 gave MiniLM int8 sentences 1.30x, fp32 1.18x, passages and cross-encoder pairs
# 1.02-1.04x, MPNet-base passages 1.04x, and 13-73 MB less peak memory. Calls of one or two
# long rows lose to per-call overhead what the cache gives back (MPNet passages at 512 with no
# row floor 0.99x), so a call keeps 4 rows at any length. Earlier, on Zen 3 with calls 32
# wide, the 2048 cap came from unbounded 8.2-8.5 s vs 2048 5.7-6.2 s for 192 mixed texts.
MAX_BATCH_TOKENS = 512
MIN_BATCH_ROWS = 4


def pad_rows(rows: Sequence, fill=0, *, width: int | None = None, dtype=np.int64) -> np.ndarray:
    """Rows of different lengths (each (n, *rest)) as one (B, T, *rest) array, right-padded
    with `fill`; T = the longest row, or `width` (longer rows cut to it)."""
    arrays = [np.asarray(r, dtype=dtype) for r in rows]
    lengths = [len(a) for a in arrays]
    T = max(lengths, default=0) if width is None else width
    rest = next((a.shape[1:] for a in arrays if a.ndim > 1 and len(a)), ())
    out = np.full((len(arrays), T, *rest), fill, dtype=dtype)
    for i, a in enumerate(arrays):  # one copy per row
        n = min(len(a), T)
        out[i, :n] = a[:n]
    return out


@dataclass
class Padded:
    """Graph inputs for a batch: (B, T) int64 arrays, right-padded; `lengths` (B,) unpadded."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray
    lengths: np.ndarray

    def feeds(self, token_types: bool = True) -> dict[str, np.ndarray]:
        """The graph's inputs; without `token_types`, zeros for them: a family that takes none
        (RoBERTa, XLM-R) reads zeros in transformers, though a tokenizer's pair template may
        still number segments."""
        types = self.token_type_ids if token_types else np.zeros_like(self.token_type_ids)
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": types}


def pad_batch(ids: Sequence[Sequence[int]], pad_id: int, type_ids: Sequence | None = None,
              *, width: int | None = None) -> Padded:
    """Token id rows (and their segment ids; zeros when None) as one right-padded batch."""
    input_ids = pad_rows(ids, pad_id, width=width)
    T = input_ids.shape[1]
    lengths = np.fromiter((min(len(r), T) for r in ids), dtype=np.int64, count=len(ids))
    types = (np.zeros_like(input_ids) if type_ids is None
             else pad_rows(type_ids, 0, width=T))
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    return Padded(input_ids, mask, types, lengths)


def pad_encodings(encodings: Sequence, pad_id: int, *, width: int | None = None) -> Padded:
    """tokenizers Encodings (anything with .ids and .type_ids) as one right-padded batch."""
    return pad_batch([e.ids for e in encodings], pad_id, [e.type_ids for e in encodings],
                     width=width)


@dataclass
class Batch(Padded):
    """One micro-batch: row r is encoding `index[r]` of the caller's list."""

    index: np.ndarray = field(kw_only=True)  # (B,)


def _spans(sorted_lengths: np.ndarray, batch_size: int, max_tokens: int, min_rows: int
           ) -> Iterator[tuple]:
    """[lo, hi) runs of ascending lengths: ≤ batch_size rows, and ≤ max_tokens padded tokens
    unless the run is shorter than min_rows (always at least one row), so long texts go in
    small batches and short ones in full ones."""
    lo, n = 0, len(sorted_lengths)
    while lo < n:
        hi = lo + 1
        while (hi < n and hi - lo < batch_size
               and (hi - lo < min_rows or (hi - lo + 1) * int(sorted_lengths[hi]) <= max_tokens)):
            hi += 1
        yield lo, hi
        lo = hi


def padded_width(longest: np.ndarray | int, multiple: int = 1, limit: int | None = None):
    """A batch's width for its longest row: rounded up to `multiple` (an engine that compiles a
    kernel per shape sees fewer shapes), never past `limit` (the model's positions) unless the
    row itself is."""
    width = -(-np.asarray(longest) // multiple) * multiple
    return width if limit is None else np.maximum(np.minimum(width, limit), longest)


def micro_batches(encodings: Sequence, batch_size: int, pad_id: int,
                  max_tokens: int = MAX_BATCH_TOKENS, min_rows: int = MIN_BATCH_ROWS,
                  multiple: int = 1, limit: int | None = None) -> Iterator[Batch]:
    """Length-sorted micro-batches of `encodings` (anything with .ids and .type_ids), each
    padded to `padded_width` of its longest row (`multiple`, `limit`: the engine's)."""
    if batch_size < 1:
        raise InputError(f"batch_size must be ≥ 1, got {batch_size}", "pass a positive batch size")
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    order = np.argsort(lengths, kind="stable")
    widths = padded_width(lengths[order], multiple, limit)   # ascending, as the lengths
    for lo, hi in _spans(widths, batch_size, max_tokens, min_rows):
        idx = order[lo:hi]
        p = pad_encodings([encodings[i] for i in idx], pad_id, width=int(widths[hi - 1]))
        yield Batch(p.input_ids, p.attention_mask, p.token_type_ids, p.lengths, index=idx)
