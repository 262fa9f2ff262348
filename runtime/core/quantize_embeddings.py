"""Sentence vectors in fewer bits: sentence-transformers' `quantize_embeddings` as pure numpy, and
the per-dimension ranges its int8/uint8 read, calibrated once at export (export/calibrate.py).

    int8 / uint8   each value bucketed into 256 steps between its dimension's calibrated
                   minimum and maximum: floor((x - min) / step), clipped to 0..255; int8 is
                   that less 128. A text's codes depend on the ranges only, never on the
                   other texts of its request.
    ubinary        the sign bits, packed eight to a byte (np.packbits(x > 0)): 1/8 the length
    binary         ubinary - 128, as int8

Cohere's embedding_types name the same packings ("binary", "ubinary", "int8", "uint8"), and
"base64" (the float vector's little-endian float32 bytes, base64-encoded). Reference:
sentence-transformers 5.7 util/quantization.py `quantize_embeddings`.
"""
from __future__ import annotations

import base64

import numpy as np

from .errors import InputError

# what quantize() makes; "float32" leaves the vectors as they are
PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
RANGED = ("int8", "uint8")


def calibrate(vectors: np.ndarray) -> np.ndarray:
    """The ranges of `vectors` (N, D): a (2, D) array of each dimension's minimum and maximum."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return np.vstack((vectors.min(axis=0), vectors.max(axis=0)))


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """`vectors` (N, D) float at `precision`; int8 and uint8 need `ranges` (2, D)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if precision == "float32":
        return vectors
    if precision in RANGED:
        if ranges is None:
            raise InputError(f"{precision} needs calibrated ranges", "pass ranges=")
        # float32 arithmetic throughout, as sentence-transformers' on float32 vectors and
        # ranges (float64 would put a few values in the next bucket)
        ranges = np.asarray(ranges, dtype=np.float32)
        if ranges.shape != (2, vectors.shape[-1]):
            raise InputError(f"{precision} ranges are {ranges.shape}, the vectors have "
                             f"{vectors.shape[-1]} dimensions", "pass the ranges of this width")
        starts = ranges[0]
        steps = (ranges[1] - ranges[0]) / 255
        # a dimension that never varied: one step of 1, as sentence-transformers' (no 0/0)
        steps = np.where(steps == 0, 1, steps)
        codes = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return codes.astype(np.uint8) if precision == "uint8" else (codes - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(vectors > 0, axis=-1).reshape(vectors.shape[0], -1)
    if precision == "binary":
        packed = np.packbits(vectors > 0, axis=-1).reshape(vectors.shape[0], -1)
        return (packed.astype(np.int16) - 128).astype(np.int8)
    raise InputError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}",
                     "pass precision='int8'")


def base64_floats(vector) -> str:
    """One vector as Cohere's (and OpenAI's) base64: its little-endian float32 bytes."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
