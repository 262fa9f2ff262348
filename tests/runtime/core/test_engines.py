"""runtime/core/engines.py: what `--providers` accepts, what `auto` picks on each kind of CPU
(never an engine the export did not prove), OpenVINO's answers against the CPU provider's on
every task over padded batches, and the one-line errors."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import engines, once, openvino_engine
from bertonnx.runtime.core.contract import BF16_MIN_MEAN_COSINE, FP32_ATOL, MANIFEST_NAME
from bertonnx.runtime.core.errors import ConfigError

from tests.conftest import CLS, EMB, FM, NER, QA, cli_without
from tests.runtime._engines import BF16, NO_BF16, NO_OPENVINO, OPENVINO, padded_feeds

needs_openvino = pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
RECORD = {"openvino:f32": {"passed": True}, "openvino:bf16": {"passed": True}}


@pytest.mark.parametrize("spec, key", [("cpu", "cpu:f32"), ("CPU", "cpu:f32"),
                                       ("CPUExecutionProvider", "cpu:f32"),
                                       ("CPUExecutionProvider,cpu", "cpu:f32")])
def test_the_cpu_provider_by_any_of_its_names(spec, key):
    assert engines.parse(spec).key == key
    assert engines.parse(spec).providers == ("CPUExecutionProvider",)


@pytest.mark.parametrize("spec, message", [
    ("tpu", "execution provider 'tpu' is not available in this onnxruntime (available: "),
    ("openvino:fp8", "engine openvino has no precision 'fp8' — use one of f32, bf16"),
    ("cpu:bf16", "engine cpu has no precision 'bf16' — use one of f32"),
    ("cuda", "execution provider 'cuda' is not available in this onnxruntime"),
])
def test_bad_engines_are_one_line(spec, message):
    with pytest.raises(ConfigError) as e:
        engines.parse(spec)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_another_provider_this_onnxruntime_has_runs_as_it_is():
    """A provider outside the table (ROCm, DirectML, CoreML builds; AzureExecutionProvider in
    every build) is taken by its onnxruntime name, the CPU provider behind it."""
    c = engines.parse("AzureExecutionProvider")
    assert c.providers == ("AzureExecutionProvider", "CPUExecutionProvider")


@pytest.mark.parametrize("spec", [None, "auto", "AUTO", ""])
def test_auto_is_decided_later(spec):
    assert engines.parse(spec) is None


@pytest.mark.parametrize("spec", [None, "auto", "cpu"])
def test_a_session_without_a_manifest_runs_on_the_cpu_provider(spec):
    assert engines.concrete(spec).providers == ("CPUExecutionProvider",)


@pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
def test_bare_openvino_without_a_parity_record_is_f32():
    """bf16 needs an export's parity record (`choose` reads it); a bare session has none."""
    assert engines.concrete("openvino").key == "openvino:f32"


@pytest.mark.parametrize("kind", ["avx2", "avx512", ""])  # "": Arm, old x86
def test_auto_keeps_the_cpu_provider_where_it_is_measured_fastest(kind, monkeypatch):
    monkeypatch.delenv(engines.ENVIRONMENT)
    c = engines.choose(None, quantization="none", engines=RECORD, kind=kind)
    assert c.key == "cpu:f32" and c.reason.startswith("auto")


def test_auto_on_vnni_takes_openvino_bf16_only(monkeypatch):
    """On AVX-512 VNNI (Zen 4, Ice Lake) OpenVINO pays only at bf16 (Zen 4's AVX512-BF16):
    its f32 measured level with the CPU provider, so a failed bf16 gate or a CPU without bf16
    keeps the CPU provider, never OpenVINO f32."""
    monkeypatch.delenv(engines.ENVIRONMENT)
    pick = lambda record, q="none": engines.choose(None, quantization=q, engines=record,  # noqa
                                                   kind="avx512-vnni").key
    assert pick(RECORD) == ("openvino:bf16" if BF16 else "cpu:f32")
    assert pick({**RECORD, "openvino:bf16": {"passed": False}}) == "cpu:f32"
    assert pick({}) == "cpu:f32"
    assert pick(RECORD, "int8") == "cpu:f32"


@needs_openvino
def test_auto_on_amx_takes_openvino_only_where_the_export_proved_it(monkeypatch):
    monkeypatch.delenv(engines.ENVIRONMENT)
    pick = lambda record, q="none": engines.choose(None, quantization=q, engines=record,  # noqa
                                                   kind="amx").key
    assert pick(RECORD) == ("openvino:bf16" if BF16 else "openvino:f32")
    # bf16 failed its gate: the exact OpenVINO, not the less accurate one
    assert pick({**RECORD, "openvino:bf16": {"passed": False}}) == "openvino:f32"
    assert pick({}) == "cpu:f32"                       # no record: an export made without it
    assert pick(RECORD, "int8") == "cpu:f32"           # OpenVINO runs none of its ops
    # what the user asks for wins over auto; plain `openvino` takes the best proved precision
    assert engines.choose("cpu", quantization="none", engines=RECORD, kind="amx").key == "cpu:f32"
    assert engines.choose("openvino", quantization="none", engines={}, kind="amx").key == \
        "openvino:f32"


def test_amx_without_a_record_says_what_it_would_gain_once(monkeypatch, caplog):
    monkeypatch.delenv(engines.ENVIRONMENT)
    monkeypatch.setattr(once, "_given", set())
    with caplog.at_level(logging.INFO, logger="bertonnx.engines"):
        for _ in range(3):
            assert engines.choose(None, quantization="none", engines={}, kind="amx",
                                  where="exp").key == "cpu:f32"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    if OPENVINO:
        assert lines[0].startswith("exp has no OpenVINO parity record")
    else:
        assert "pip install 'bertonnx[openvino]'" in lines[0]


def test_the_environment_sets_the_default_and_an_argument_wins(monkeypatch):
    monkeypatch.setenv(engines.ENVIRONMENT, "cpu")
    assert engines.choose(None, quantization="none", engines=RECORD, kind="amx").key == "cpu:f32"
    monkeypatch.setenv(engines.ENVIRONMENT, "tpu")
    with pytest.raises(ConfigError, match="execution provider 'tpu' is not available"):
        engines.choose(None, quantization="none", engines={}, kind="amx")


def test_without_the_extra_openvino_is_one_line_naming_it(tiny_export):
    r = cli_without(("onnxruntime_ep_openvino", "openvino"), "embed", tiny_export(EMB), "a cat",
                    "--providers", "openvino")
    assert r.returncode == 2
    assert r.stderr.strip() == ("bertonnx: error: the openvino engine needs the openvino "
                                "extra — pip install 'bertonnx[openvino]'"), r.stderr


def test_openvino_s_answer_here_is_the_same_when_asked_again(tiny_export):
    """Where the plugin offers no device (it skips non-Intel CPUs) the second ask must say so
    too, not that the plugin is registered twice; the command line gives the same line."""
    first = engines.unavailable("openvino")
    assert engines.unavailable("openvino") == first
    if first is None:
        return  # it runs here: the tests below compare its answers
    assert "\n" not in first and first.endswith("use --providers cpu")
    r = cli_without((), "embed", tiny_export(EMB), "a cat", "--providers", "openvino")
    assert (r.returncode, r.stderr.strip()) == (2, f"bertonnx: error: {first}")


# -- OpenVINO against the CPU provider --------------------------------------------------------

@needs_openvino
@pytest.mark.parametrize("name", [FM, CLS, QA, NER, EMB])
def test_openvino_f32_gives_the_cpu_providers_outputs(tiny_export, name):
    """Every output, unpadded positions, over batch×seq shapes with padding: within the fp32
    tolerance of the CPU provider's (both are held to it against torch at export)."""
    cpu, ov = (load(tiny_export(name), providers=p) for p in ("cpu", "openvino:f32"))
    assert ov.session.config.engine == "openvino" and ov.session.config.precision == "f32"
    for seed, (b, s) in enumerate([(1, 1), (1, 7), (3, 5), (4, 33), (7, 16), (2, 64)]):
        feeds = padded_feeds(b, s, seed)
        want, got = cpu.session.run(feeds), ov.session.run(feeds)
        keep = feeds["attention_mask"].astype(bool)
        for name_ in want:
            w, g = want[name_], got[name_]
            if w.ndim >= 2 and w.shape[1] == s:   # a sequence axis: unpadded positions only
                w, g = w[keep], g[keep]
            assert np.abs(w - g).max() <= FP32_ATOL, (name_, b, s)


@needs_openvino
def test_the_export_records_each_engines_parity(tiny_export):
    record = json.loads((tiny_export(CLS, parity=True) / MANIFEST_NAME).read_text())["engines"]
    f32 = record["openvino:f32"]
    assert f32["passed"] and max(f32["max_abs"].values()) <= FP32_ATOL
    assert len(f32["shapes"]) > 5            # the whole grid, padded rows included
    bf16 = record["openvino:bf16"]
    if BF16:
        assert bf16["mode"] == "cosine" and bf16["gate_mean_cosine"] == BF16_MIN_MEAN_COSINE
        assert bf16["passed"] == all(v >= BF16_MIN_MEAN_COSINE
                                     for v in bf16["mean_cosine"].values())
    else:
        assert not bf16["passed"] and "no bf16 arithmetic" in bf16["note"]


@pytest.mark.skipif(not BF16, reason=NO_BF16)
def test_bf16_embeddings_stay_within_the_gate_and_differ_from_f32(tiny_export):
    """bf16 really runs (the vectors move) and stays within its gate of the exact ones."""
    texts = ["the cat sat on the mat", "a dog", "paris is a city in france " * 5]
    exact = load(tiny_export(EMB), providers="cpu")(texts, return_tensors=True)
    half = load(tiny_export(EMB), providers="openvino:bf16")(texts, return_tensors=True)
    cos = (exact * half).sum(1) / np.linalg.norm(exact, axis=1) / np.linalg.norm(half, axis=1)
    assert cos.min() >= BF16_MIN_MEAN_COSINE and np.abs(exact - half).max() > 1e-6


@needs_openvino
def test_a_dynamic_int8_graph_on_openvino_is_one_line(tiny_checkpoint, tmp_path):
    """onnxruntime's dynamic int8 graph (model.onnx) asked for at an OpenVINO float precision:
    its ops are onnxruntime's own. (Plain `openvino` on an int8 export reads its static int8
    graph instead: tests/export/test_openvino_int8.py.)"""
    from bertonnx.export import ExportOptions, export_model

    export_model(tiny_checkpoint(CLS), CLS, tmp_path / "q",
                 ExportOptions(quantize="int8", parity=False, openvino_int8=False))
    with pytest.raises(ConfigError) as e:
        load(tmp_path / "q", providers="openvino:f32")
    assert str(e.value).startswith("OpenVINO cannot run every op of") and "\n" not in str(e.value)
    # auto never sends it there
    assert load(tmp_path / "q", providers="auto").session.config.engine == "cpu"


def test_the_command_line_shows_the_advice_once_where_bf16_pays(tiny_export):
    """Without the extra, `auto` on an fp32 export: on a CPU with AMX or AVX512-BF16 one INFO
    line with the pip command (the CLI shows it), elsewhere nothing."""
    import os
    import subprocess
    import sys

    from bertonnx.runtime.core.cpu import cpu_flags, this_kind

    code = ("import sys; sys.modules['onnxruntime_ep_openvino'] = sys.modules['openvino'] = None\n"
            "from bertonnx.runtime.cli import main\n"
            f"sys.exit(main(['embed', {str(tiny_export(EMB))!r}, 'a cat', 'a dog']))")
    env = {k: v for k, v in os.environ.items() if k != engines.ENVIRONMENT}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("bertonnx: INFO:")]
    if this_kind() == "amx" or (this_kind() == "avx512-vnni" and "avx512_bf16" in cpu_flags()):
        assert len(lines) == 1 and lines[0].endswith("pip install 'bertonnx[openvino]'"), lines
    else:
        assert lines == [], lines


def test_gpu_engines_fall_back_as_onnxruntime_orders_them():
    """TensorRT hands the nodes it cannot build to CUDA, then the CPU provider (a TensorRT
    that fails to load must not land on the CPU while CUDA is there); a plugin runs alone."""
    chain = engines._with_fallback
    assert chain(engines.ENGINES["tensorrt"]) == (
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
    assert chain(engines.ENGINES["cuda"]) == ("CUDAExecutionProvider", "CPUExecutionProvider")
    assert chain(engines.ENGINES["openvino"]) == ("OpenVINOExecutionProvider",)


@needs_openvino
def test_micro_batches_follow_the_engine(tiny_export):
    """The CPU provider's calls stop at 512 padded tokens; OpenVINO's at 2048 (AMX wants larger
    GEMMs; its static int8 graph's at 1024: tests/export/test_openvino_int8.py), its batches'
    widths in steps of 16 (a kernel compiled per shape)."""
    texts = ["the cat sat on the mat with the dog in paris and london"] * 256
    for engine, cap, multiple in (("cpu", 512, 1), ("openvino:f32", 2048, 16)):
        pipe = load(tiny_export(EMB), providers=engine)
        assert pipe.session.config.batch_tokens == cap
        assert pipe.session.config.pad_multiple == multiple
        seen, run = [], pipe.session.run
        pipe.session.run = lambda feeds, outputs=None: (seen.append(feeds["input_ids"].shape),
                                                        run(feeds, outputs))[1]
        pipe(texts, batch_size=256)
        assert max(b * t for b, t in seen) <= cap < sum(b * t for b, t in seen)
        assert max(b * t for b, t in seen) > cap // 2   # filled up to it, not far below
        assert all(t % multiple == 0 for _, t in seen)


@needs_openvino
@pytest.mark.parametrize("name, call", [
    (EMB, lambda p, xs: p(xs, pooling="none", batch_size=3)),
    (NER, lambda p, xs: p(xs, aggregation_strategy="none", batch_size=3)),
    (QA, lambda p, xs: p([{"question": "where ?", "context": x} for x in xs], top_k=2)),
])
def test_openvino_s_rounded_widths_answer_as_the_unpadded(tiny_export, name, call):
    """OpenVINO pads batches to widths in steps of 16: its answers equal those of batches
    padded to their longest row (f32: the same arithmetic, the padding masked)."""
    import dataclasses

    from tests.runtime._compare import assert_same

    texts = ["paris", "the cat sat on the mat and the dog ran to the river in paris",
             "a dog", "she said it was a good film and he said it was a bad film !"]
    pipe = load(tiny_export(name), providers="openvino:f32")
    assert pipe.session.config.pad_multiple == 16
    padded = call(pipe, texts)
    pipe.session.config = dataclasses.replace(pipe.session.config, pad_multiple=1)
    assert_same(padded, call(pipe, texts), atol=1e-5)


def test_streams_are_as_asked_within_the_threads():
    """"auto" is the engine's (OpenVINO two, the CPU provider one); never more than the
    threads, each stream one thread at least."""
    ov, cpu = engines.Choice("openvino", "bf16"), engines.Choice("cpu", "f32")
    assert (ov.streams("auto", 2), ov.streams("auto", 1), cpu.streams("auto", 8)) == (2, 1, 1)
    assert (cpu.streams(3, 8), cpu.streams(3, 2), ov.streams(1, 8)) == (3, 2, 1)
    config = json.loads(openvino_engine.openvino_options("bf16", 2, 2)["load_config"])["CPU"]
    assert config == {"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": "2",
                      "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": "2"}
    one = json.loads(openvino_engine.openvino_options("bf16", 2)["load_config"])["CPU"]
    assert "NUM_STREAMS" not in one and "PERFORMANCE_HINT" not in one
