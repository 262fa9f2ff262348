"""Parity on every other engine the export can run with (runtime/core/engines.py), recorded in
the manifest's `engines`: OpenVINO at f32 (the fp32 tolerance, as the CPU provider) and bf16
(mean cosine per token to torch fp32, contract.BF16_MIN_MEAN_COSINE), against the same kept
torch outputs the CPU provider's parity used. `auto` runs an engine only where its entry
passed; an entry that fails is recorded, never a refusal of the export (the CPU provider's
parity decides that), and a load that asks for it by name runs it with a warning.

Measured only where it means something: an fp32 graph (OpenVINO runs none of a dynamic int8
graph's ops), the extra installed, and bf16 only on a CPU that computes bf16 (elsewhere OpenVINO
runs f32 when asked for bf16, so the figure would be f32's).
"""
from __future__ import annotations

from pathlib import Path

from bertonnx.runtime.core import engines, openvino_engine
from bertonnx.runtime.core.errors import BertOnnxError
from bertonnx.runtime.core.session import create_session

from . import parity

# engine:precision -> the judge of its figures, fed the grid reference and a session
JUDGES = {
    "openvino:f32": parity.compare_grid,
    "openvino:bf16": parity.compare_cosine,
}


def judge(reference, model_path: Path, mode: str, say) -> dict:
    """Each other engine's figures on the graph at `model_path` (an fp32 export's grid
    reference); {} where none can be measured here."""
    if reference is None or mode != "none" or not engines.installed("openvino"):
        return {}
    figures = {}
    for key, compare in JUDGES.items():
        name, _, prec = key.partition(":")
        if prec == "bf16" and not openvino_engine.has_bf16():
            figures[key] = {"passed": False, "note": "not measured: this CPU has no bf16 "
                            "arithmetic (OpenVINO would run f32)"}
            continue
        say(f"checking parity on {key}")
        choice = engines.Choice(name, prec, "export parity", (engines.ENGINES[name].provider,))
        try:
            sess = create_session(model_path, providers=choice, memory_arena=False).inner
        except BertOnnxError as e:
            figures[key] = {"passed": False, "note": str(e)}
            continue
        figures[key] = compare(reference, sess)
        del sess
    return figures
