"""`python -m bertonnx.bench.batch_caps` at a toy size: each configuration reaches the
pipeline's micro-batching (the session sees calls within its limits), every configuration is
timed every round, and the command prints the table with a peak RSS from a fresh process. No
timing assertions."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bertonnx.bench.batch_caps import (Cap, _configured, parse_caps, peak_rss_mb, throughput,
                                       workload)
from bertonnx.bench.commands import batch_caps_command
from bertonnx.runtime import load
from bertonnx.runtime.core.batches import MAX_BATCH_TOKENS, MIN_BATCH_ROWS
from bertonnx.runtime.core.errors import InputError
from tests.conftest import EMB


def _calls(pipe, cap: Cap, work: str, calls: int) -> list[tuple[int, int]]:
    """(B, T) of every session call the work makes under `cap`."""
    shapes, inner = [], pipe.session.run

    def run(feeds, outputs=None):
        shapes.append(feeds["input_ids"].shape)
        return inner(feeds, outputs)

    pipe.session.run = run
    run_work, _ = workload(pipe, work, calls)
    _configured(pipe, cap, run_work)()
    pipe.session.run = inner
    return shapes


@pytest.mark.parametrize("name,work", [(EMB, "sentences"), ("text-ranking", "pairs")])
def test_each_cap_reaches_the_micro_batches(tiny_export, name, work):
    pipe = load(tiny_export(name), threads=1)
    tight = _calls(pipe, Cap(48, 1), work, 3)
    assert tight and all(B * T <= 48 or B == 1 for B, T in tight)
    floor = _calls(pipe, Cap(48, 3), work, 3)
    assert max(B * T for B, T in floor) > 48          # 3 rows kept past the tokens
    wide = _calls(pipe, Cap(100_000, 1), work, 3)
    assert len(wide) < len(tight) and max(B for B, _ in wide) == 32   # batch_size still caps


def test_every_cap_is_timed_every_round(tiny_export):
    caps = [Cap(2048, 1), Cap(64, 4)]
    out = throughput(tiny_export(EMB), "passages", caps, calls=3, rounds=2, threads=1)
    assert list(out) == caps and all(len(v) == 2 and min(v) > 0 for v in out.values())


def test_caps_parse_and_refuse():
    assert parse_caps(None) == [Cap(MAX_BATCH_TOKENS, MIN_BATCH_ROWS)]
    assert parse_caps("2048:1, 512:4,256") == [Cap(2048, 1), Cap(512, 4), Cap(256, 1)]
    for bad in ("x:1", "512:0", "-3", "512:4,512:4"):
        with pytest.raises(InputError, match="--caps"):
            parse_caps(bad)


def test_a_peak_process_that_dies_is_an_error_not_a_wait(tmp_path):
    with pytest.raises(RuntimeError, match="ended with exit code 1"):
        peak_rss_mb(tmp_path / "no-export", "sentences", Cap(512, 4))


def test_the_command_prints_ratios_and_peaks(tiny_export):
    folder = tiny_export(EMB)
    args = [str(folder), "--caps", "2048:1,64:4", "--calls", "3", "--rounds", "1",
            "--threads", "1", "--memory"]
    res = CliRunner().invoke(batch_caps_command, args + ["--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert [(r["tokens"], r["rows"]) for r in rep["results"]] == [(2048, 1), (64, 4)]
    assert rep["results"][0]["ratio"] == 1.0
    assert all(r["peak_rss_mb"] > 50 for r in rep["results"])   # a Python + onnxruntime process
    text = CliRunner().invoke(batch_caps_command, args[:-1]).output
    assert "| 64 tokens, ≥ 4 rows |" in text and rep["cpu"] in text
    bad = CliRunner().invoke(batch_caps_command, [str(folder), "--caps", "512:x"])
    assert bad.exit_code == 2 and "TOKENS:ROWS" in bad.output
