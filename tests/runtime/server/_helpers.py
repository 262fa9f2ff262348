"""What the server tests share: Starlette's in-process `TestClient`, a stand-in pipeline
(`EchoPipeline`) and `wait_ready`, for the app in-process; `jsonable` and `assert_close` (with
`BATCHED_ATOL`) for comparing a server's JSON with the library's answer."""
from __future__ import annotations

import json
import math
import time
import warnings

from bertonnx.runtime.core.pipelines.base import Work
from bertonnx.runtime.core.pipelines.inputs import read_texts

with warnings.catch_warnings():
    # Starlette 1.x would rather its TestClient ran on httpx2; httpx (the serve extra) works.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

__all__ = ["BATCHED_ATOL", "EchoPipeline", "TestClient", "assert_close", "jsonable",
           "wait_ready"]

# Requests merged into a batch are padded with others: their floats may move by float32
# rounding, so they are compared at this absolute tolerance (strings, ints, labels exactly).
BATCHED_ATOL = 1e-5


class EchoPipeline:
    """A list in gives a list out; `boom` in the input raises a non-library error. It has the
    interface the server uses: the task's input rules, parameter check, work and unwrap."""

    task = "fill-mask"

    def __call__(self, inputs, top_k: int = 5, targets=None, batch_size=None):
        read = self.read_inputs(inputs)
        if any("boom" in t for t in read.records):
            raise RuntimeError("secret internal detail /etc/passwd")
        out = [[{"token_str": t.upper(), "score": 0.5, "top_k": top_k}] for t in read.records]
        return self.unwrap(out, read)

    @staticmethod
    def read_inputs(inputs):
        return read_texts(inputs)   # an empty text is an InputError here

    @staticmethod
    def unwrap(results, read, **params):
        return results[0] if read.single else results

    def check_parameters(self, **params):
        pass

    @staticmethod
    def windowed_chars(read):
        return 0

    counted = "inputs"

    @staticmethod
    def count(read):
        return len(read)

    def work(self, read, **params):
        return Work(len(read))


def wait_ready(client, timeout=10.0):
    """Until the app's /health says 200 (its model loaded), within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while client.get("/health").status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def jsonable(x):
    """`x` as it comes back from JSON (tuples as lists, int keys as strings)."""
    return json.loads(json.dumps(x))


def assert_close(got, want, atol: float, path: str = "$"):
    """Same structure, same strings/ints/bools, floats within atol."""
    if isinstance(want, float) or isinstance(got, float):
        assert isinstance(got, (int, float)) and isinstance(want, (int, float)), path
        assert math.isclose(got, want, rel_tol=0, abs_tol=atol), f"{path}: {got} vs {want}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{path}: {got} vs {want}"
        for k in want:
            assert_close(got[k], want[k], atol, f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{path}: {got} vs {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_close(g, w, atol, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r} vs {want!r}"
