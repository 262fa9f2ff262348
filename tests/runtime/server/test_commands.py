"""`bertonnx serve`'s options reach the engine that runs: the batch width is 128 on bertonnx's
own server (its measured default, BENCHMARKS.md "Serving against infinity") and Triton's own
default with --engine triton, unless --max-batch-size is given. The servers themselves are
started in test_server.py and tests/runtime/triton; here the call each would get is caught."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from bertonnx.runtime.cli.main import cli
from bertonnx.runtime.server.batching import BatchConfig
from bertonnx.runtime.triton.serve import TritonServeOptions


@pytest.fixture
def caught(monkeypatch):
    calls = []
    monkeypatch.setattr("bertonnx.runtime.server.process.run_server",
                        lambda model_dir, options, **kw: calls.append(options) or 0)
    monkeypatch.setattr("bertonnx.runtime.triton.serve.serve_triton",
                        lambda model_dir, options, **kw: calls.append(options) or 0)
    return calls


@pytest.mark.parametrize("argv, want", [
    ([], 128), (["--max-batch-size", "8"], 8),
    (["--engine", "triton"], TritonServeOptions.max_batch_size),
    (["--engine", "triton", "--max-batch-size", "8"], 8)])
def test_the_batch_width_each_engine_gets(tiny_export, caught, argv, want):
    res = CliRunner().invoke(cli, ["serve", str(tiny_export("feature-extraction")), *argv])
    assert res.exit_code == 0, res.output
    (options,) = caught
    width = (options.max_batch_size if "triton" in argv else options.batch.max_batch_size)
    assert width == want
    assert BatchConfig().max_batch_size == 128 and TritonServeOptions.max_batch_size == 32


def test_the_part_size_reaches_the_server_and_not_triton(tiny_export, caught):
    export = str(tiny_export("feature-extraction"))
    res = CliRunner().invoke(cli, ["serve", export, "--part-size", "16"])
    assert res.exit_code == 0, res.output
    assert caught[0].batch.part_size == 16 and caught[0].batch.part == 16
    res = CliRunner().invoke(cli, ["serve", export, "--engine", "triton", "--part-size", "16"])
    assert res.exit_code == 2 and "--part-size does not apply with --engine triton" in res.output
