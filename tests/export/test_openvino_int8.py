"""export/openvino_int8.py: the static int8 graph for OpenVINO an int8 export writes beside
model.onnx — written, hashed and judged by the int8 gate at export; read by `openvino:int8`
(by name, or `auto` for bulk work on Zen 4); as accurate as CTranslate2's int8 on real weights
and held-out prose; one-line errors for what cannot be."""
from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import engines, openvino_engine
from bertonnx.runtime.core.contract import (INT8_MIN_COSINE, INT8_MIN_MEAN_COSINE,
                                            MANIFEST_NAME)
from bertonnx.runtime.core.errors import ArtifactError, ConfigError

from bertonnx.runtime.cli import main

from tests.conftest import CLS, EMB, cli_without
from tests.runtime._engines import NO_OPENVINO, OPENVINO

pytestmark = pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
# not imported here: export runs NNCF in a child process (export/openvino_int8.py `write`)
needs_nncf = pytest.mark.skipif(importlib.util.find_spec("nncf") is None,
                                reason="the static int8 graph is made by NNCF (bertonnx[nncf])")
pytestmark = [pytestmark, needs_nncf]


@pytest.fixture(scope="module")
def int8_export(tiny_checkpoint, tmp_path_factory):
    """A tiny sentence-embedding int8 export with parity, as `export` writes it by default."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    out = tmp_path_factory.mktemp("ov-int8") / "q"
    export_model(tiny_checkpoint(EMB), EMB, out, ExportOptions(quantize="int8"))
    return out


def _texts(n: int = 23) -> list[str]:
    words = "the a cat sat on mat while rain fell over quiet hills and rivers ran".split()
    return [" ".join(words[(i * 7) % len(words):][: 1 + (i * 5) % 30] * (1 + i % 4))
            for i in range(n)]


def test_the_export_writes_hashes_and_judges_the_graph(int8_export):
    manifest = json.loads((int8_export / MANIFEST_NAME).read_text())
    record = manifest["engines"]["openvino:int8"]
    assert record["file"] == "model.openvino-int8.xml"
    assert {record["file"], record["weights"]} <= set(manifest["files"])   # sha256-verified
    assert record["mode"] == "int8" and record["examples"] == 40
    assert record["passed"] == bool(
        record["agreement"] >= record["min_agreement"]
        and record["metrics"]["cosine_mean"] >= INT8_MIN_MEAN_COSINE
        and record["metrics"]["cosine_min"] >= INT8_MIN_COSINE)
    assert record["hint"] == openvino_engine.openvino_hint("int8")
    assert record["hint"] == ("bf16" if openvino_engine.has_bf16() else "f32")
    assert "calibration_en.txt" in record["calibration"]
    assert record["recipe"].endswith("SmoothQuant alpha 0.8")


def test_the_recipe_keeps_attention_s_core_and_the_first_down_projection_fp32(tiny_export):
    """What the recipe leaves unquantized: Q·Kᵀ and P·V of every layer (no weight among their
    inputs) and the first layer's FFN down projection (after a Gelu)."""
    ov = pytest.importorskip("openvino")
    from bertonnx.export.openvino_int8 import kept_fp32

    folder = tiny_export(EMB)
    model = ov.Core().read_model(str(folder / "model.onnx"))
    layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    names = kept_fp32(model)
    every = [op for op in model.get_ops() if op.get_type_name() == "MatMul"]
    assert len(names) == len(set(names)) == 2 * layers + 1
    assert len(every) > len(names)
    assert sum("down" in n or "output" in n for n in names) <= 1


def test_openvino_int8_answers_close_to_the_int8_graph_over_padded_batches(int8_export):
    """The same sentence vectors (by cosine) as onnxruntime's int8 graph of the same export,
    on OpenVINO's own runtime, in batches of mixed lengths (padding, OpenVINO's widths)."""
    ov = load(int8_export, providers="openvino:int8")
    assert ov.session.config.key == "openvino:int8"
    assert ov.session.providers == ["OpenVINO"]
    cpu = load(int8_export, providers="cpu")
    texts = _texts()
    a = np.asarray(ov(texts, return_tensors=True, batch_size=5))
    b = np.asarray(cpu(texts, return_tensors=True, batch_size=5))
    assert a.shape == b.shape
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.98, cos   # two int8 graphs, each within the gate of fp32 torch
    # a text's vector does not depend on its batch (a static graph: scales fixed at export)
    alone = np.asarray(ov(texts[3:4], return_tensors=True))
    np.testing.assert_allclose(alone[0], a[3], atol=2e-2)


def test_its_calls_stop_at_1024_padded_tokens(int8_export):
    """The static int8 graph's calls hold up to 1,024 padded tokens (VNNI's products gain
    nothing from more; OpenVINO's other precisions take 2,048), widths in steps of 16."""
    ov = load(int8_export, providers="openvino:int8")
    seen, run = [], ov.session.run
    ov.session.run = lambda feeds, outputs=None: (seen.append(feeds["input_ids"].shape),
                                                  run(feeds, outputs))[1]
    ov(["the cat sat on the mat with the dog in paris and london"] * 256, batch_size=256)
    assert max(b * t for b, t in seen) <= 1024 < sum(b * t for b, t in seen)
    assert max(b * t for b, t in seen) > 512   # filled up to it, not far below
    assert all(t % 16 == 0 for _, t in seen)


def test_auto_takes_it_for_bulk_work_on_zen_4_only(monkeypatch):
    """`auto` takes it for throughput work (`run`, Ray Data: load's `bulk`) on AVX-512 VNNI,
    where it measured faster and more exact in bulk; never for latency work (served short
    texts ran level, at 2.6-2.7x the RSS: docs/engines.md), nor on AMX (not measured with
    this recipe). A row takes it only for an int8 export whose record passed, on a CPU that
    computes bf16 (the hint its speed and parity were measured at)."""
    monkeypatch.delenv(engines.ENVIRONMENT, raising=False)
    passed = {"openvino:int8": {"passed": True, "file": "model.openvino-int8.xml"}}
    bf16 = openvino_engine.openvino_hint("int8") == "bf16"

    def pick(record, kind, q="int8", bulk=True):
        return engines.choose(None, quantization=q, engines=record, kind=kind, bulk=bulk)

    for kind in ("amx", "avx512-vnni", "avx2", ""):
        assert pick(passed, kind, bulk=False).key == "cpu:f32"
    assert pick(passed, "avx512-vnni").key == ("openvino:int8" if bf16 else "cpu:f32")
    if bf16:
        assert pick(passed, "avx512-vnni").reason.startswith("auto: bulk work on avx512-vnni")
    for kind in ("amx", "avx2", ""):
        assert pick(passed, kind).key == "cpu:f32"
    assert pick({"openvino:int8": {"passed": False, "file": "x"}}, "avx512-vnni").key == \
        "cpu:f32"
    assert pick(passed, "avx512-vnni", q="none").key == "cpu:f32"   # not an fp32 export's
    # asked for by name, it runs wherever OpenVINO does, for any work
    assert engines.choose("openvino", quantization="int8", engines=passed,
                          kind="amx").key == "openvino:int8"
    assert "openvino:int8" in engines.runnable("int8", passed)


def test_a_bulk_job_runs_on_it_by_default(int8_export, tmp_path, monkeypatch, capsys):
    """`bertonnx run`'s default on Zen 4 (forced here, so every CPU runs the test; a CPU
    without bf16 keeps the CPU provider): the static graph, named in the summary, its rows as
    `openvino:int8` asked for by name gives them; the library's default call stays on the CPU
    provider."""
    monkeypatch.delenv(engines.ENVIRONMENT, raising=False)
    monkeypatch.setattr(engines, "this_kind", lambda: "avx512-vnni")
    expected = ("openvino:int8" if openvino_engine.openvino_hint("int8") == "bf16"
                else "cpu:f32")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                           for i, t in enumerate(_texts(30))))
    args = ["run", str(int8_export), "--input", str(src), "--json", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "auto.jsonl")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engine"] == expected and summary["rows"] == 30
    assert main([*args, "--output", str(tmp_path / "named.jsonl"), "--providers",
                 expected]) == 0
    assert (tmp_path / "auto.jsonl").read_bytes() == (tmp_path / "named.jsonl").read_bytes()
    # the engine is the work's, whatever the calls at once
    assert main([*args, "--output", str(tmp_path / "one.jsonl"), "--streams", "1"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["engine"] == expected
    # a library call (latency work) keeps the CPU provider on the same CPU, at any streams
    assert load(int8_export).session.config.key == "cpu:f32"
    assert load(int8_export, streams="auto").session.config.key == "cpu:f32"
    assert load(int8_export, bulk=True).session.config.key == expected


def test_on_real_weights_it_is_as_accurate_as_ctranslate2_on_held_out_prose(minilm_dir,
                                                                            minilm_int8):
    """all-MiniLM-L6-v2's int8 export, its OpenVINO graph against sentence-transformers fp32 on
    prose no calibration saw (bench/inputs.py's; calibration is WordNet's): issue 41's int8 bar,
    CTranslate2's accuracy — mean >= 0.995, worst >= 0.99 per text."""
    from sentence_transformers import SentenceTransformer

    from bertonnx.bench.inputs import prose_passages, prose_sentences

    folder, _ = minilm_int8   # `export --quantize int8` with its defaults
    record = json.loads((folder / MANIFEST_NAME).read_text())["engines"]["openvino:int8"]
    assert record["passed"], record
    reference = SentenceTransformer(str(minilm_dir), device="cpu")
    pipe = load(folder, providers="openvino:int8")
    for texts in (prose_sentences(256), prose_passages(64)):
        want = reference.encode(texts, normalize_embeddings=True)
        got = np.asarray(pipe(texts, return_tensors=True))
        cos = (got * want).sum(1) / np.linalg.norm(got, axis=1)
        assert cos.mean() >= INT8_MIN_MEAN_COSINE and cos.min() >= INT8_MIN_COSINE, (
            cos.mean(), cos.min())


def test_an_export_without_the_graph_says_so_in_one_line(tiny_checkpoint, tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    export_model(tiny_checkpoint(CLS), CLS, tmp_path / "q",
                 ExportOptions(quantize="int8", parity=False, openvino_int8=False))
    assert not (tmp_path / "q" / "model.openvino-int8.xml").exists()
    for spec in ("openvino", "openvino:int8"):
        with pytest.raises(ConfigError) as e:
            load(tmp_path / "q", providers=spec)
        assert str(e.value).startswith("this export has no OpenVINO int8 graph")
        assert "\n" not in str(e.value)
    assert load(tmp_path / "q").session.config.engine == "cpu"


def test_a_file_the_manifest_did_not_hash_is_refused(int8_export, tmp_path):
    """The graph is read only as a file the manifest verified (never a path it merely names)."""
    copy = tmp_path / "copy"
    shutil.copytree(int8_export, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["engines"]["openvino:int8"]["file"] = "../elsewhere.xml"
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="names ../elsewhere.xml for openvino:int8"):
        load(copy, providers="openvino:int8")


def test_a_graph_that_failed_its_gate_runs_by_name_with_one_warning(int8_export, tmp_path,
                                                                    caplog):
    """all-mpnet-base-v2's static int8 graph fails its gate (cosine mean 0.9944, worst 0.9874:
    docs/engines.md): `auto` leaves it, and asked for by name it runs, saying so once."""
    copy = tmp_path / "failed"
    shutil.copytree(int8_export, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    record = manifest["engines"]["openvino:int8"]
    record.update(passed=False, metrics={"cosine_mean": 0.9944, "cosine_min": 0.9874})
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with caplog.at_level("WARNING", logger="bertonnx"):
        texts = _texts(5)
        ran = load(copy, providers="openvino:int8")
        assert ran.session.config.engine == "openvino" and len(ran(texts)) == 5
        load(copy, providers="openvino:int8")              # the same folder: no second line
        assert load(copy).session.config.engine == "cpu"   # auto: never the failed graph
        load(int8_export, providers="openvino:int8")       # one that passed: no line
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{copy}: openvino:int8 failed its gate at export (agreement ")
    assert "cosine mean 0.9944, worst 0.9874" in lines[0] and "\n" not in lines[0]
    # exported with --no-parity: no verdict to report, and the line says so, not "failed"
    unjudged = tmp_path / "unjudged"
    shutil.copytree(int8_export, unjudged)
    manifest["engines"]["openvino:int8"] = {**record, "note": "not judged (--no-parity)"}
    (unjudged / MANIFEST_NAME).write_text(json.dumps(manifest))
    caplog.clear()
    with caplog.at_level("WARNING", logger="bertonnx"):
        load(unjudged, providers="openvino:int8")
    assert [r.getMessage() for r in caplog.records] == [
        f"{unjudged}: openvino:int8 has no verdict from export: not judged (--no-parity); asked "
        "for by name, it runs — `--providers auto` takes only what passed"]


def test_the_command_line_reports_it_and_refuses_what_cannot_be(tiny_checkpoint, tmp_path,
                                                                 capsys):
    ckpt = str(tiny_checkpoint(EMB))
    calibration = tmp_path / "mine.txt"
    calibration.write_text("\n".join(_texts(40)) + "\n")
    rc = main(["export", ckpt, "--task", EMB, "--out", str(tmp_path / "q"), "--quantize",
               "int8", "--calibration", str(calibration)])
    out = capsys.readouterr().out
    assert rc == 0 and "parity openvino:int8: agreement" in out, out
    manifest = json.loads((tmp_path / "q" / MANIFEST_NAME).read_text())
    assert manifest["engines"]["openvino:int8"]["calibration"] == "mine.txt"
    rc = main(["export", ckpt, "--task", EMB, "--out", str(tmp_path / "f"), "--openvino-int8"])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().endswith("add --quantize int8"), err
    r = cli_without(("nncf",), "export", ckpt, "--task", EMB, "--out", tmp_path / "n",
                    "--quantize", "int8", "--openvino-int8")
    assert r.returncode == 2
    assert r.stderr.strip() == ("bertonnx: error: --openvino-int8 needs nncf, which is not "
                                "installed — pip install 'bertonnx[nncf]'"), r.stderr
    # without NNCF, and not asked for: the int8 export alone, as before
    r = cli_without(("nncf",), "export", ckpt, "--task", EMB, "--out", tmp_path / "m",
                    "--quantize", "int8", "--no-parity")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "m" / "model.openvino-int8.xml").exists()
