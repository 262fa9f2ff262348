"""`python -m bertonnx.bench.families --quick`: tiny random MPNet, DeBERTa-v3 and ModernBERT
checkpoints, each exported by bertonnx (and Optimum, when installed) and timed against the
transformers pipeline; the table has a row per family × engine with figures in every cell the
engine has (no timing assertions: the ratios are only read side by side)."""
from __future__ import annotations

import json

from click.testing import CliRunner

from bertonnx.bench.commands import families_command
from bertonnx.bench.compare import has_optimum
from bertonnx.bench.families import ENGINES
from bertonnx.bench.family_models import FAMILIES
from bertonnx.bench.machine import cpu_model


def test_quick_run_has_a_row_per_family_and_engine(tmp_path):
    out = tmp_path / "families.json"
    run = CliRunner().invoke(families_command, ["--quick", "--work", str(tmp_path / "work"),
                                                "--json", str(out)])
    assert run.exit_code == 0, run.output
    result = json.loads(out.read_text())
    assert result["skipped"] == []
    optimum = has_optimum()
    # the tiny models all take Optimum's O2 path, so its plain-export row never shows
    engines = [e for e in ENGINES if e != "Optimum plain fp32"
               and (optimum or not e.startswith("Optimum"))]
    assert [f["family"] for f in result["families"]] == list(FAMILIES)
    table = run.stdout
    assert cpu_model() in table and "instruction sets:" in table
    for f in result["families"]:
        assert f["weights"] == "random" and f["config"]["num_hidden_layers"] == 2
        assert [r["engine"] for r in f["rows"]] == engines
        for r in f["rows"]:
            # every engine answers end to end and runs the model alone on the same feeds
            assert r["texts_per_s"] > 0 and r["model_ms"] > 0
            assert r["e2e_vs_transformers"] > 0 and r["model_vs_transformers"] > 0
            assert 0 <= r["agreement"] <= 1
            if optimum:
                assert r["e2e_vs_optimum_int8"] > 0 and r["model_vs_optimum_int8"] > 0
            line = next(ln for ln in table.splitlines()
                        if ln.startswith(f"| {f['title']} (random) | {r['engine']} |"))
            assert "—" not in line  # every cell has its figure
        assert next(r for r in f["rows"] if r["engine"] == "transformers")[
            "e2e_vs_transformers"] == 1.0
    assert "random weights (seeded)" in table
