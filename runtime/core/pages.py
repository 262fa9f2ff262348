"""Pages of an export's graph files that an engine compiled away, handed back.

OpenVINO compiles its own copy of the weights (bf16 or f32) when the session is made, reading
the graph's weights file (model.onnx.data) whole through onnxruntime's read-only mapping of it;
onnxruntime keeps that mapping for the session's life, so every page of the file stayed
resident and counted in the process's RSS though nothing reads it again: 86 of the 171 MB of
file-backed RSS of all-MiniLM-L6-v2 on OpenVINO bf16 (docs/engines.md, "Measured").

`release(path)` drops this process's pages of the graph's files (madvise MADV_DONTNEED on its
read-only mappings of them). The mapping stays, and a page read again comes back from the
file, the same bytes: nothing can change but time. The kernel keeps them in its page cache
(evictable, unless another process maps them). Linux only; elsewhere nothing happens.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

MADV_DONTNEED = 4   # linux/mman-common.h
MAPS = Path("/proc/self/maps")


def release(model: str | Path) -> int:
    """Drop this process's resident pages of `model` and the files beside it named after it
    (its external data: model.onnx.data); returns the bytes of mappings advised."""
    if not MAPS.is_file():
        return 0
    prefix = os.path.realpath(model)
    spans = []
    for line in MAPS.read_text().splitlines():
        parts = line.split(maxsplit=5)
        # a read-only mapping of the graph's files: never one a write could have changed
        if len(parts) == 6 and parts[5].startswith(prefix) and parts[1][1] == "-":
            start, end = (int(x, 16) for x in parts[0].split("-"))
            spans.append((start, end - start))
    if not spans:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return sum(n for start, n in spans if libc.madvise(start, n, MADV_DONTNEED) == 0)
