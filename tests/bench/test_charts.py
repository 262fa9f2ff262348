"""`python -m bertonnx.bench.charts`: a chart per task from a real (toy-sized) retrieval run and
one from a serve_peers result of its real shape; each PNG exists and reads back as an image.
No timing asserts: the figures of a toy run mean nothing."""
from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from click.testing import CliRunner

from bertonnx.bench.charts import charts_of, make_charts
from bertonnx.bench.commands import charts_command
from bertonnx.bench.retrieval import RetrievalOptions, retrieval

pytest.importorskip("matplotlib", reason="the charts need matplotlib (the [bench] extra)")
HAS_ST = importlib.util.find_spec("sentence_transformers") is not None
PNG = b"\x89PNG\r\n\x1a\n"

SERVE = {  # bench.serve_peers --json, two servers at one request size
    "cpu": "Intel(R) Xeon(R) Platinum, 2 cores, avx512f amx_bf16 amx_int8",
    "args": {"clients": 16, "seconds": 20, "rounds": 3},
    "rows": [{"server": "bertonnx serve (defaults)", "texts_per_request": 8,
              "texts_per_s": 410.2, "min": 400.0, "max": 415.9, "p50_ms": 300.1,
              "p99_ms": 420.0, "peak_rss_mb": 310.5, "errors": 0, "cosine_mean": 1.0,
              "cosine_worst": 0.9999},
             {"server": "infinity onnx/ --engine optimum", "texts_per_request": 8,
              "texts_per_s": 250.0, "min": 240.0, "max": 260.0, "p50_ms": 500.0,
              "p99_ms": 700.0, "peak_rss_mb": 900.0, "errors": 0}],
    "runs": {},
}


def _is_png(path) -> None:
    import matplotlib.image

    assert path.is_file() and path.read_bytes()[:8] == PNG, path
    height, width = matplotlib.image.imread(path).shape[:2]
    assert height > 100 and width > 100, (path, height, width)


def test_a_chart_per_task_from_a_retrieval_run(tmp_path, tiny_checkpoint, tiny_export):
    work = tmp_path / "work"
    shutil.copytree(tiny_export("feature-extraction"), work / "bertonnx-embed-fp32")
    result = retrieval(RetrievalOptions(
        work=work, tasks=("embed",), texts=3, rounds=2, threads=1, precisions=("none",),
        peers=("st-torch", "st-torch-bf16") if HAS_ST else (),
        embed_model=tiny_checkpoint("feature-extraction")))
    if HAS_ST:  # the bf16 peer answers, as numpy (torch's bf16 has no numpy dtype)
        bf16 = next(r for r in result["tasks"][0]["rows"] if r["engine"].endswith("torch bf16"))
        assert bf16["precision"] == "bf16" and 0 < bf16["accuracy"]["mean"] <= 1.0001
    path = tmp_path / "embed.json"
    path.write_text(json.dumps(result))
    (chart,) = charts_of(result, "embed")
    assert result["machine"]["cpu"] in chart.title and len(chart.bars) == len(
        result["tasks"][0]["rows"])
    assert all(("cosine" in b.note) or ("reference" in b.note) for b in chart.bars)
    (png,) = make_charts([path], tmp_path / "img")
    assert png.name == f"{chart.name}.png"
    _is_png(png)


def test_a_serving_chart_and_the_command(tmp_path):
    path = tmp_path / "serve-minilm.json"
    path.write_text(json.dumps(SERVE))
    out = CliRunner().invoke(charts_command, [str(path), "--out", str(tmp_path / "img")])
    assert out.exit_code == 0, out.output
    png = tmp_path / "img" / "serve-minilm.png"
    assert out.output.strip() == str(png)
    _is_png(png)
    (chart,) = charts_of(SERVE, "x")
    assert chart.bars[0].ours and "accuracy not measured" in chart.bars[1].note
