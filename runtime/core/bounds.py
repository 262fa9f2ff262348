"""Bounds on the knobs every entry point takes — the library, the CLI and the server refuse
the same absurd values, each in one line, before onnxruntime sees them.

Neither is a tuning limit: past them onnxruntime fails (10^11 threads: a pybind TypeError;
2^31 - 1: std::bad_alloc, which read as a damaged export) or a single batch's logits alone
would need more memory than any machine has.
"""
from __future__ import annotations

from .errors import ConfigError, InputError

MAX_THREADS = 1024        # onnxruntime intra-op threads per session
MAX_BATCH_SIZE = 4096     # sequences per onnxruntime call
MAX_STREAMS = 64          # session calls at once (the engine's threads split between them)


def check_threads(threads) -> None:
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                or not 0 <= threads <= MAX_THREADS):
        raise ConfigError(f"threads {threads!r} is not an integer from 0 to {MAX_THREADS}",
                          "pass e.g. --threads 4 (0 = onnxruntime's default)")


def check_batch_size(batch_size, example: str = "--batch-size 32") -> None:
    if (not isinstance(batch_size, int) or isinstance(batch_size, bool)
            or not 1 <= batch_size <= MAX_BATCH_SIZE):
        raise InputError(f"batch size {batch_size!r} is not an integer from 1 to "
                         f"{MAX_BATCH_SIZE}", f"pass e.g. {example}")


def check_streams(streams) -> None:
    if streams != "auto" and (not isinstance(streams, int) or isinstance(streams, bool)
                              or not 1 <= streams <= MAX_STREAMS):
        raise ConfigError(f"streams {streams!r} is not \"auto\" or an integer from 1 to "
                          f"{MAX_STREAMS}", "pass e.g. --streams 2, or --streams auto")


def read_streams(value) -> int | str:
    """--streams as typed: "auto" or an integer, checked."""
    if isinstance(value, str) and value != "auto" and value.strip().isdigit():
        value = int(value)
    check_streams(value)
    return value
