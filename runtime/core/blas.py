"""numpy's BLAS runs one thread once a session is made: the engine owns the cores.

Post-processing multiplies in numpy between engine calls (a ColBERT Dense projection, BGE-M3's
heads, a sentence-transformers Dense module). numpy's OpenBLAS runs such a product on every
core, and its worker threads then spin waiting for the next one, on the cores the engine's own
threads need for the next call. Measured on an Intel Xeon with AMX, 2 cores, 256 prose passages
through a ColBERT (MiniLM + 384 -> 128 Dense), `python -m bertonnx.bench.colbert_peers`: 6.5 s
on the cpu engine and 2.2 s on OpenVINO bf16 with OpenBLAS at its default, 3.5 s and 1.3 s with
it at one thread; pipelines that never multiply in numpy (MiniLM mean pooling) did not move.

A process that set its BLAS threads itself (OPENBLAS_NUM_THREADS, MKL_NUM_THREADS,
OMP_NUM_THREADS, BLIS_NUM_THREADS in the environment) keeps them: that is the way to ask for
more (docs/engines.md). threadpoolctl is the library made for this (numpy has no such setting).
"""
from __future__ import annotations

import logging
import os

from threadpoolctl import threadpool_limits

from .once import first_time

log = logging.getLogger(__name__)

# the variables by which a user (or a launcher such as Ray) has chosen BLAS threads already
USER_SETTINGS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS",
                 "BLIS_NUM_THREADS")


def engine_owns_cores() -> None:
    """Once per process: numpy's BLAS libraries to one thread, unless the environment chose."""
    if not first_time("blas-threads"):
        return
    chosen = [v for v in USER_SETTINGS if os.environ.get(v)]
    if chosen:
        log.debug("numpy's BLAS threads left as %s chose", chosen[0])
        return
    threadpool_limits(1, user_api="blas")
    log.debug("numpy's BLAS limited to one thread: the engine's threads own the cores")
