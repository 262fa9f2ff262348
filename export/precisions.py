"""The precisions an export can have, in one table.

Each row says how the fused fp32 graph is converted, how the result is judged against the
torch model, the one-line summary of that judgement, and what a refusal tells the user.
export/api.py runs the row `--quantize` names; export/commands.py offers the table's names as
choices and prints the summary; the manifest records the conversion's settings. A new
precision is one row here and its conversion (int8: the export/int8/ package; fp16:
export/fp16.py).

Imports stay light: the CLI reads the table to build `--help`; torch, onnx and onnxruntime load
only when a row's functions run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from bertonnx.runtime.core.errors import CheckFailed, ConfigError, lookup

from .int8 import recipes


# --- conversions ([proto], ExportOptions, scratch folder or None, variant, tokenizer) ->
# (proto, the manifest's quantization record); each takes the proto out of its box (a list of
# one), so the fp32 graph can go before the converted one is made (recipes.convert) ---------

def _int8(box, options, scratch=None, variant=None, tokenizer=None):
    variant = variant or recipes.candidates(options, tokenizer)[0]
    return recipes.convert(variant, box, options, scratch, tokenizer)


def _fp16(box, options, scratch=None, variant="", tokenizer=None):
    # lazy: onnx and onnxruntime.transformers; `export --help` reads this table
    from . import fp16
    return fp16.convert(box.pop())


# --- candidates: the variants an export tries in order until the judge passes one ----------

def _one(options, tokenizer=None) -> tuple[str, ...]:
    return ("",)


def _int8_recipes(options, tokenizer=None) -> tuple[str, ...]:
    return recipes.candidates(options, tokenizer)


# --- references (model, tokenizer, folder) -> the torch outputs a judge compares with; and
# judges (reference, session) -> parity figures. Two steps, so export can drop the torch model
# before it loads the graph (export/parity.py's Reference). -------------------------------

def _grid_reference(model, tokenizer, folder):
    from . import parity  # lazy: torch and onnx; `export --help` reads this table
    return parity.grid_reference(model, folder)


def _grid(reference, sess):
    from . import parity  # lazy: torch and onnx; `export --help` reads this table
    return parity.compare_grid(reference, sess)


def _fp16_figures(reference, sess):
    from . import parity  # lazy: torch and onnx; `export --help` reads this table
    return parity.compare_fp16(reference, sess)


def _agreement_reference(model, tokenizer, folder):
    from . import agreement  # lazy: torch; `export --help` reads this table
    return agreement.agreement_reference(model, tokenizer, folder)


def _agreement(reference, sess):
    from . import agreement  # lazy: torch; `export --help` reads this table
    return agreement.compare_agreement(reference, sess)


# --- summaries: one line per parity report ---------------------------------------------------

def _fp32_line(f: dict) -> str:
    worst = ", ".join(f"{k} {v:.2e}" for k, v in f["max_abs"].items())
    return (f"parity fp32: max |Δ| {worst} (tolerance {f['atol']:g}) over "
            f"{len(f['shapes'])} batch×seq shapes: {'PASS' if f['passed'] else 'FAIL'}")


def _int8_line(f: dict) -> str:
    parts = ", ".join(f"{k} {v:.3f}" for k, v in f["metrics"].items())
    return (f"parity int8: {parts} on {f['examples']} real sentences "
            f"(minimum {f['min_agreement']}): {'PASS' if f['passed'] else 'FAIL'}")


def _fp16_line(f: dict) -> str:
    rel = ", ".join(f"{k} {v:.2e}" for k, v in f["rel_max_abs"].items())
    return f"parity fp16: max |Δ|/scale {rel} (reported, not enforced; fp16 targets GPUs)"


# --- refusals: the CheckFailed a failed judgement raises --------------------------------------

def _fp32_refusal(task: str, f: dict) -> CheckFailed:
    name, worst = max(f["max_abs"].items(), key=lambda kv: kv[1])
    return CheckFailed(f"parity failed: {name} differs by {worst:.3g} (> {f['atol']:g}) "
                       f"at batch×seq {f['worst_shape'][name]}",
                       "run `bertonnx parity DIR --reference MODEL --per-layer` to locate it")


def _int8_refusal(task: str, f: dict) -> CheckFailed:
    metric = next(iter(f["metrics"]))  # the verdict's metric (agreement.task_metrics)
    return CheckFailed(
        f"int8 refused: its {task} agreement with the fp32 torch model ({metric}) is "
        f"{f['agreement']:.3f} on {f['examples']} real sentences, below the "
        f"{f['min_agreement']} an int8 export must reach",
        "export fp32 (drop --quantize int8), or export anyway with --no-parity (the int8 graph "
        "is then unchecked; measure it later with `bertonnx parity DIR --reference MODEL`)")


def _never_refused(task: str, f: dict) -> CheckFailed:
    raise AssertionError("fp16 figures are reported, never enforced")


@dataclass(frozen=True)
class Precision:
    name: str                                   # the --quantize value
    report_mode: str                            # the parity report's "mode"
    help: str
    progress: str                               # what export says while converting
    convert: Callable | None                    # None: the fused fp32 graph as it is
    candidates: Callable                        # (ExportOptions, tokenizer) -> variants, in order
    reference: Callable                         # (model, tokenizer, folder) -> Reference
    judge: Callable[..., dict]                  # (Reference, session) -> figures
    summary: Callable[[dict], str]
    refusal: Callable[[str, dict], CheckFailed]


PRECISIONS: dict[str, Precision] = {p.name: p for p in (
    Precision("none", "fp32", "fp32: element-wise parity over a grid of batch×seq shapes.",
              "", None, _one, _grid_reference, _grid, _fp32_line, _fp32_refusal),
    Precision("int8", "int8", "int8 of the fused graph, for CPUs, by the recipe measured "
              "fastest for --target-cpu; judged by task agreement with the fp32 model on real "
              "sentences.",
              "quantizing to int8", _int8, _int8_recipes, _agreement_reference, _agreement,
              _int8_line, _int8_refusal),
    Precision("fp16", "fp16", "float16 for GPU providers; its error is reported, not enforced.",
              "converting to float16 (for GPU providers)", _fp16, _one, _grid_reference,
              _fp16_figures, _fp16_line, _never_refused),
)}


def precision(name: str) -> Precision:
    return lookup(PRECISIONS, name, "quantization", ConfigError)


def summary_line(figures: dict) -> str:
    """One line summarising a parity report of any precision."""
    if "passed" not in figures:  # never judged (--no-parity, or adopted without a reference)
        return f"parity: {figures.get('note', 'not checked')}"
    by_mode = {p.report_mode: p for p in PRECISIONS.values()}
    return by_mode[figures.get("mode", "fp16")].summary(figures)
