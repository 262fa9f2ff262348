"""`bertonnx serve` whose model calls wait at a gate the test holds, for the overload test:

    python -m tests.runtime.server._gated_serve DIR [serve's flags]    ($BERTONNX_TEST_GATE=PATH)

A model call (the pipeline's __call__, in the batcher's worker thread) waits while the file
PATH does not exist; every pricing of a request (`work`, where its inputs are tokenized) adds a
line to PATH.priced. Everything else is the real command: the CLI, uvicorn, the app, the
batcher and the export's own pipeline, which answers once the gate opens. The gate makes "the
model is still busy" a state the test sets, not a race it hopes to win.
"""
from __future__ import annotations

import os
import sys
import time

from bertonnx.runtime.cli.main import main
from bertonnx.runtime.server import registry


class Gated:
    """The pipeline, its calls held at the gate and its pricings counted."""

    def __init__(self, pipeline, gate: str):
        self._pipeline, self._gate = pipeline, gate

    def __getattr__(self, name):
        return getattr(self._pipeline, name)

    def work(self, *args, **kwargs):
        with open(self._gate + ".priced", "a", encoding="utf-8") as f:
            f.write("priced\n")
        return self._pipeline.work(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        while not os.path.exists(self._gate):   # the test opens it; a poll, not a timing
            time.sleep(0.005)
        return self._pipeline(*args, **kwargs)


def run() -> int:
    gate = os.environ["BERTONNX_TEST_GATE"]
    load = registry.Model.load   # each served model's loader
    registry.Model.load = lambda self: Gated(load(self), gate)
    return main(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(run())
