"""`python -m bertonnx.bench.grid` at a toy size: a tiny random BERT, bertonnx fp32 and the
transformers reference (and CTranslate2 where it is installed), two cells, two rounds. No
timing assertions: every engine runs every cell, bertonnx's pooled hidden states equal the
reference's (so the accuracy column measures precision, not a wiring mistake), the report
names the machine and every engine."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from bertonnx.bench.grid import GridOptions, grid, mean_pooled
from bertonnx.bench.grid_report import format_grid
from bertonnx.runtime.core.errors import InputError

HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None


@pytest.fixture(scope="module")
def result(tiny_checkpoint, tmp_path_factory):
    options = GridOptions(work=tmp_path_factory.mktemp("grid"),
                          model=tiny_checkpoint("feature-extraction"), batches=(1, 3),
                          lengths=(5,), rounds=2, warmup=0, texts=11, threads=1,
                          engines=("bertonnx", "torch", "ctranslate2"), precisions=("none",))
    return grid(options)


def test_every_engine_runs_every_cell(result):
    assert [(c["batch"], c["length"]) for c in result["cells"]] == [(1, 5), (3, 5)]
    names = {"bertonnx fp32", "transformers (torch)"}
    assert names <= set(result["engines"])
    for cell in result["cells"]:
        assert set(cell["ms"]) == set(result["engines"])
        assert all(t["n"] == 2 and 0 < t["min"] <= t["median"] <= t["max"]
                   for t in cell["ms"].values())
    if not HAS_CT2:
        assert [s["name"] for s in result["skipped"]] == ["CTranslate2"]


def test_bertonnx_fp32_pools_as_the_reference_does(result):
    assert result["reference"] == "transformers (torch)"
    fp32 = result["accuracy"]["bertonnx fp32"]
    assert fp32["cosine_min"] > 0.99999, fp32
    assert result["accuracy"]["transformers (torch)"]["cosine_min"] == pytest.approx(1.0)


def test_mean_pooling_ignores_padding():
    hidden = np.array([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]], np.float32)
    mask = np.array([[1, 1, 0]])
    np.testing.assert_allclose(mean_pooled(hidden, mask), [[2 ** -0.5, 2 ** -0.5]], rtol=1e-6)
    # an engine that pads only to its batch's longest row (CTranslate2) returns fewer columns
    wide = np.array([[1, 1, 0, 0, 0]])
    np.testing.assert_allclose(mean_pooled(hidden[:, :2], wide), [[2 ** -0.5, 2 ** -0.5]],
                               rtol=1e-6)


def test_the_report_names_the_machine_and_every_engine(result):
    text = format_grid(result)
    assert result["machine"]["cpu"] in text and "| 3 × 5 |" in text
    for name in result["engines"]:
        assert f"| {name} |" in text


@pytest.mark.parametrize("bad, match", [(dict(rounds=0), "rounds must be ≥ 1"),
                                        (dict(batches=()), "batches and lengths"),
                                        (dict(engines=("nope",)), "unknown engine: nope")])
def test_bad_options_are_refused_in_one_line(bad, match):
    with pytest.raises(InputError, match=match):
        GridOptions(**bad)


def test_mixed_adds_the_end_to_end_workload_to_the_grid(tiny_checkpoint, tiny_export,
                                                        tmp_path):
    """`--mixed`: issue 30's two workloads from one command — the grid, then the mixed-length
    sentences through each engine's own embedding call (the retrieval bench's embed task),
    same model and engines."""
    import json
    import shutil

    from click.testing import CliRunner

    from bertonnx.bench.commands import grid_command

    work = tmp_path / "work"
    shutil.copytree(tiny_export("feature-extraction"), work / "bertonnx-embed-fp32")
    out = tmp_path / "grid.json"
    res = CliRunner().invoke(grid_command, [
        "--quick", "--mixed", "--fp32-only", "--engines", "bertonnx,torch", "--threads", "1",
        "--work", str(work), "--model", str(tiny_checkpoint("feature-extraction")),
        "--json", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert result["cells"] and [t["task"] for t in result["mixed"]["tasks"]] == ["embed"]
    rows = {r["engine"]: r for r in result["mixed"]["tasks"][0]["rows"]}
    has_st = importlib.util.find_spec("sentence_transformers") is not None
    assert set(rows) == {"bertonnx fp32"} | ({"sentence-transformers torch"} if has_st else set())
    assert rows["bertonnx fp32"]["accuracy"]["worst"] > 0.9999
    assert "| 1 × " in res.output and "| engine | precision |" in res.output
