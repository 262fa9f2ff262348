"""int8 recipes per CPU kind (export/int8/recipes.py): the table, the choice for a target, what
the manifest records, and the next recipe when the agreement gate refuses one. Tiny exports;
no timing is asserted (the speeds behind the table are in BENCHMARKS.md)."""
from __future__ import annotations

import onnx
import pytest

from bertonnx.export import ExportOptions, export_model, graph
from bertonnx.export.int8 import recipes
from bertonnx.export.int8.recipes import RECIPES, TARGETS, candidates
from bertonnx.runtime.core import cpu
from bertonnx.runtime.core.contract import MODEL_NAME
from bertonnx.runtime.core.errors import CheckFailed, InputError

from tests.int8_options import ort_int8

TASK = "text-classification"


def test_every_cpu_kind_has_a_row_of_known_recipes():
    assert tuple(TARGETS) == cpu.TARGET_KINDS
    for t in TARGETS.values():
        assert t.recipes and set(t.recipes) <= set(RECIPES) and t.rationale
        assert len(set(t.recipes)) == len(t.recipes)
    # without VNNI the int16 pair sums saturate on full-range weights: only 7-bit weights
    for kind in ("avx2", "avx512"):
        assert all(RECIPES[r].settings.reduce_range for r in TARGETS[kind].recipes)


def test_candidates_follow_settings_recipe_then_target(monkeypatch):
    from bertonnx.export.int8.settings import Int8Settings

    assert candidates(ExportOptions(quantize="int8", int8=Int8Settings())) == ("custom",)
    assert candidates(ExportOptions(quantize="int8", int8_recipe="nbits8")) == ("nbits8",)
    assert candidates(ExportOptions(quantize="int8", target_cpu="amx")) == TARGETS["amx"].recipes
    monkeypatch.setattr(cpu, "this_kind", lambda: "avx512-vnni")
    assert candidates(ExportOptions(quantize="int8")) == TARGETS["avx512-vnni"].recipes
    # no tokenizer (nothing to calibrate on): the row without SmoothQuant and static
    assert candidates(ExportOptions(quantize="int8", target_cpu="amx"), None) == (
        "s8", "s8-rr", "s8-attention-fp32")
    assert recipes.resolve_target("auto") == ("avx512-vnni", "auto: this CPU's flags")
    monkeypatch.setattr(cpu, "this_kind", lambda: None)  # Arm, old x86: the safest row
    assert recipes.resolve_target("auto")[0] == "avx2"
    with pytest.raises(InputError, match="unknown CPU target"):
        ExportOptions(quantize="int8", target_cpu="avx9")
    with pytest.raises(InputError, match="unknown int8 recipe"):
        ExportOptions(quantize="int8", int8_recipe="int4")


@pytest.mark.parametrize("target", ["avx2", "amx"])
def test_manifest_records_target_recipe_and_evidence(tiny_checkpoint, tmp_path, target):
    m = export_model(tiny_checkpoint(TASK), TASK, tmp_path / target,
                     ort_int8(target_cpu=target))
    q, row = m.quantization, TARGETS[target]
    assert q["target"] == target and q["target_chosen_by"] == "--target-cpu"
    assert q["recipe"] == row.recipes[0] and q["evidence"] == row.rationale
    assert q["reduce_range"] is (RECIPES[q["recipe"]].settings.reduce_range)
    assert m.parity["passed"] and "refused_first" not in q


def test_a_refused_recipe_gives_way_to_the_next(tiny_checkpoint, tmp_path, monkeypatch):
    from bertonnx.export import agreement

    real, calls = agreement.compare_agreement, []

    def first_refused(reference, sess):
        calls.append(1)
        figures = real(reference, sess)
        return figures if len(calls) > 1 else {**figures, "agreement": 0.5, "passed": False}

    monkeypatch.setattr(agreement, "compare_agreement", first_refused)
    m = export_model(tiny_checkpoint(TASK), TASK, tmp_path / "a",
                     ort_int8(target_cpu="amx"))
    first, second = TARGETS["amx"].recipes[:2]
    assert m.quantization["recipe"] == second
    assert m.quantization["refused_first"] == [{"recipe": first, "agreement": 0.5}]

    monkeypatch.setattr(agreement, "compare_agreement",
                        lambda r, s: {**real(r, s), "agreement": 0.5, "passed": False})
    with pytest.raises(CheckFailed, match="int8 refused"):  # every recipe of the row refused
        export_model(tiny_checkpoint(TASK), TASK, tmp_path / "b",
                     ort_int8(target_cpu="amx"))
    assert not (tmp_path / "b").exists()


# what each recipe leaves in the graph (LAYERS 2: tests/conftest.py)
EXPECTED_OPS = {"s8-rr": {"QAttention": 2}, "s8": {"QAttention": 2},
                "s8-attention-fp32": {"Attention": 2, "QEmbedLayerNormalization": 1},
                "nbits8": {"Attention": 2, "MatMulNBits": 4},
                "static": {"Attention": 2, "QuantizeLinear": 4},
                # a Mul before each of the 6 MatMuls (attention out, FFN up and down per layer)
                "s8-smooth": {"QAttention": 2, "Mul": 6, "MatMulInteger": 6},
                "s8-rr-smooth": {"QAttention": 2, "Mul": 6, "MatMulInteger": 6},
                # and one before each layer's Attention (its QKV projection)
                "s8-smooth-qkv": {"QAttention": 2, "Mul": 8, "MatMulInteger": 6},
                "s8-rr-smooth-qkv": {"QAttention": 2, "Mul": 8, "MatMulInteger": 6},
                # all but the MatMul with the widest input, which stays a (fp32) MatMul
                "s8-smooth-qkv-widest-fp32": {"QAttention": 2, "Mul": 7, "MatMulInteger": 5,
                                                  "MatMul": 1},
                "s8-rr-smooth-qkv-widest-fp32": {"QAttention": 2, "Mul": 7,
                                                     "MatMulInteger": 5, "MatMul": 1}}


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_makes_a_graph_the_runtime_answers_with(tiny_checkpoint, tmp_path, name):
    from bertonnx.runtime import load

    m = export_model(tiny_checkpoint(TASK), TASK, tmp_path / name,
                     ort_int8(int8_recipe=name, parity=False))
    counts = graph.op_counts(onnx.load(str(tmp_path / name / MODEL_NAME)))
    for op, n in EXPECTED_OPS[name].items():
        assert counts.get(op, 0) >= n, (op, counts)
    assert m.quantization["recipe"] == name and m.quantization["method"]
    out = load(tmp_path / name)(["the cat sat on the mat", "a happy dog"])
    assert len(out) == 2 and all(r["label"] in ("negative", "neutral", "positive") for r in out)


def test_measured_here_keeps_the_fastest_passing_recipe_and_its_figures(tiny_checkpoint,
                                                                        tmp_path):
    m = export_model(tiny_checkpoint(TASK), TASK, tmp_path / "m",
                     ort_int8(measure_recipes=True))
    q = m.quantization
    measured = q["evidence"]["measured_here"]
    assert set(measured) == set(candidates(ExportOptions(quantize="int8")))
    passing = {r: f["ms"] for r, f in measured.items() if f["passed"]}
    assert q["recipe"] in passing and passing[q["recipe"]] == min(passing.values())
    assert m.parity["passed"] and m.parity["agreement"] == measured[q["recipe"]]["agreement"]
    assert not list((tmp_path / "m").glob("candidate-*"))  # scratch left nothing behind


def test_measuring_needs_int8_parity_and_this_cpu(monkeypatch):
    with pytest.raises(InputError, match="measure-recipes"):
        ExportOptions(quantize="int8", parity=False, measure_recipes=True)
    with pytest.raises(InputError, match="measure-recipes"):
        ExportOptions(measure_recipes=True)
    monkeypatch.setattr(cpu, "this_kind", lambda: "avx2")
    with pytest.raises(InputError, match="measures this CPU \\(avx2\\), not amx"):
        ExportOptions(quantize="int8", target_cpu="amx", measure_recipes=True)


@pytest.mark.parametrize("name", [n for n, r in RECIPES.items() if r.method == "dynamic"])
def test_the_ffn_bias_folds_into_the_int8_matmul_at_load(tiny_checkpoint, tmp_path, name):
    """BiasGelu is split back into Add + Gelu in int8 graphs (export/fusion.py
    unfuse_bias_gelu) so that onnxruntime folds the Add into DynamicQuantizeMatMul's bias:
    in the graph it runs, every Gelu reads a DynamicQuantizeMatMul's output."""
    import onnxruntime as ort

    export_model(tiny_checkpoint(TASK), TASK, tmp_path / "x",
                 ort_int8(int8_recipe=name, parity=False))
    saved = onnx.load(str(tmp_path / "x" / MODEL_NAME))
    assert "BiasGelu" not in graph.op_counts(saved)
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "ran.onnx")
    ort.InferenceSession(str(tmp_path / "x" / MODEL_NAME), opts,
                         providers=["CPUExecutionProvider"])
    ran = onnx.load(str(tmp_path / "ran.onnx"), load_external_data=False)  # the ops suffice
    producer = {o: n.op_type for n in ran.graph.node for o in n.output}
    gelus = [n for n in ran.graph.node if n.op_type == "Gelu"]
    assert len(gelus) == 2  # LAYERS
    assert all(producer[n.input[0]] == "DynamicQuantizeMatMul" for n in gelus), \
        [producer[n.input[0]] for n in gelus]
