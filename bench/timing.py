"""Round-robin timing and the arithmetic the figures rest on.

Engines run interleaved (A B C A B C ...) after a warm-up, so load from other processes on a
shared machine falls on all of them alike; figures are medians. Ratios between engines are
the claim, never absolute times.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

SETTLE_S = 0.05  # between engines: let the last one's spinning worker threads go to sleep


def stats(times: list[float]) -> dict:
    a = np.asarray(times)
    return {"median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "min": float(a.min()), "n": len(a)}


def round_robin(fns: dict[str, Callable[[], object]], repeats: int, warmup: int, *,
                clock: Callable[[], float] = time.perf_counter, settle: float = SETTLE_S,
                rotate: bool = False, before_round: Callable[[int], None] | None = None
                ) -> dict[str, list[float]]:
    """Seconds (of `clock`) per call of each fn, interleaved so background load hits all alike.

    Engines bring their own thread pools (onnxruntime's, torch's OpenMP) which spin a while
    after each call; a short pause (`settle`) before each timed call keeps one from eating the
    next's cores on a small machine. `rotate`: round r starts at the r-th fn (A B C, B C A,
    ...), so no engine always runs right after the same neighbour or first in a round;
    `before_round(r)` is called before each timed round (to record the load average)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats):
        if before_round is not None:
            before_round(r)
        k = r % len(names) if rotate and names else 0
        for name in names[k:] + names[:k]:
            fn = fns[name]
            if settle:
                time.sleep(settle)
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return times


def encoder_flops(config: dict, batch: int, seq: int) -> float:
    """Matmul FLOPs (2 per multiply-add) of one forward: per layer Q,K,V,O projections
    (4·H²), the feed-forward (2·H·I) per token, and QKᵀ + AV (2·T·H per token). Norms,
    softmax and GELU are not counted: they are memory-bound and not what the peak measures."""
    H, I, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * H * H + 2 * H * I) + 4 * tokens * seq * H
    return float(L * per_layer)
