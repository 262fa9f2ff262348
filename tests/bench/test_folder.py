"""`bertonnx bench DIR` (bench/folder.py) end to end: the command on a tiny export, every
engine this machine runs it with side by side, and the shipped export."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bertonnx.bench import timing
from bertonnx.bench.folder import engine_row, streamed_rows
from bertonnx.runtime.core.defaults import resolve_export
from bertonnx.runtime.core.engines import runnable
from bertonnx.runtime.core.foreign import read_manifest


def test_bench_command_json(cls_export, cls_checkpoint, monkeypatch):
    if "openvino:f32" in runnable("none", {}):
        # `auto` as OpenVINO f32 (the suite's is the CPU provider): its bulk-job row, 2 streams
        # where there are 2 cores, gives transformers' labels too (checked below)
        monkeypatch.setenv("BERTONNX_PROVIDERS", "openvino:f32")
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench", str(cls_export),
                          "--quick", "--reference", str(cls_checkpoint), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    ours = "bertonnx fp32 fused"
    hf = next(n for n in r["end_to_end"] if n.startswith("transformers pipeline"))
    # every engine this machine runs the export with, side by side
    others = {engine_row(ours, k) for k in runnable("none", {})} - {ours}
    others |= set(streamed_rows(ours, runnable("none", {}), r["machine"]["threads"],  # a bulk job's
                                read_manifest(cls_export)))
    assert set(r["end_to_end"]) == {ours, "scratch torch (fp32)", hf} | others
    for name, row in r["end_to_end"].items():
        assert row["items_per_s"] > 0 and math.isfinite(row["items_per_s"])
        if "bf16" not in name:  # bf16 has its own gate (tests/runtime/core/test_engines.py)
            # same model, same texts, fp32 everywhere: every engine gives transformers' answers
            assert row["agreement"] == 1.0, name
    assert set(r["latency"][ours]) == {"8", "16"}
    assert r["latency"][ours]["16"]["p90"] >= r["latency"][ours]["16"]["median"] > 0
    t = r["throughput"][ours]
    assert t["gflops"] == pytest.approx(t["gflop_per_batch"] / (t["ms"] / 1000))
    assert t["gflop_per_batch"] * 1e9 == timing.encoder_flops(
        json.loads((cls_export / "config.json").read_text()), 4, 16)
    cold = r["cold_start"]["bertonnx CLI"]
    assert cold["wall_s"]["median"] > 0 and cold["peak_rss_mib"] > 1
    assert cold["argv"][-3:-1] == ["classify", str(cls_export)]
    assert r["sizes"][ours]["weights_mb"] == pytest.approx(  # the graph and its weights' file
        sum((cls_export / n).stat().st_size for n in ("model.onnx", "model.onnx.data")) / 1e6)
    assert r["machine"]["threads"] >= 1 and "onnxruntime" in r["machine"]["versions"]


def test_bench_command_table_without_reference(cls_export, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat on the mat\nthe dog was happy\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench", str(cls_export),
                          "--quick", "--no-cold-start", "--texts", str(texts)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    for needle in ("fp32 peak", "threads", "onnxruntime", "end to end", "latency, batch 1",
                   "throughput, batch 4 × seq 16", "bertonnx fp32 fused"):
        assert needle in out.stdout
    # the model's own limit (64 positions), not a tokenizer's 512 (issue 31)
    assert " over 64, truncated by every engine" in out.stdout and "over 512" not in out.stdout
    assert "torch" not in out.stdout.split("end to end")[1]  # no reference, no torch rows


def test_bench_default_runs_the_shipped_export(tmp_path):
    """Every engine this machine has, side by side, on the shipped fill-mask export. Short
    texts: the default set's 512-token passages give (4, 512, 30522) logits, and each engine's
    session keeps its own arena for them (1.2-1.3 GB a session, 3.4 GB for three)."""
    texts = tmp_path / "texts.txt"
    texts.write_text("Paris is a city in France.\nThe cat sat on the mat.\n", encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench", "default",
                          "--quick", "--no-cold-start", "--texts", str(texts), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    ours, keys = "bertonnx fp32 fused", runnable("none", {})
    assert list(r["end_to_end"]) == ([engine_row(ours, k) for k in keys]
                                     + list(streamed_rows(ours, keys, r["machine"]["threads"],
                                                          read_manifest(resolve_export("default")))))
