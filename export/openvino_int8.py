"""Static int8 for OpenVINO (issue 41, item 3): NNCF's post-training quantization of the fused
fp32 graph, written beside an int8 export's model.onnx as an OpenVINO IR (`FILE`, .xml + .bin),
which the `openvino` engine runs at `openvino:int8` (runtime/core/engines.py).

Why a second graph: onnxruntime's int8 (model.onnx) is dynamic — each MatMul quantizes its
activations at run time, and attention's core stays fp32 — while OpenVINO runs a calibrated
graph with its scales fixed, the rest at bf16 where the CPU computes bf16. On AMD Zen 4
(AVX512-BF16, VNNI), MiniLM through bertonnx's pipelines, it is 1.13-1.33x the int8 export in
bulk (mixed text and documents), but 0.86-0.90x served short sentences at 2.6-3.2x the RSS
(docs/engines.md, "Static int8 on OpenVINO"), so it is run when asked for (`--providers
openvino:int8`: bulk encoding of documents), not by `auto`. OpenVINO reads the IR, not an ONNX
file, so onnxruntime never sees it; the manifest's `engines["openvino:int8"]` names the file
and records its parity (the int8 gate and contract.INT8_MIN_*).

The recipe (NNCF 3.4, `ModelType.TRANSFORMER`: SmoothQuant, symmetric int8 weights, fast bias
correction) keeps fp32 what held the worst sentence down on held-out prose (bench.openvino_int8):
attention's core (Q·Kᵀ and P·V, two activations multiplied — as onnxruntime's QAttention keeps
it) and the first layer's FFN down projection, with SmoothQuant's alpha at 0.8 (NNCF's 0.95
left the later down projections' worst sentence under 0.99; docs/engines.md). Calibration: the
300 WordNet sentences of calibration_en.txt, and the same joined eight at a time into passages
(long inputs, whose activations short sentences do not reach) — text of no benchmark's held-out
set — or the user's own (`--calibration FILE`). Needs `nncf` and `openvino` at export only
(`pip install 'bertonnx[nncf]'`); the runtime needs `openvino` alone.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np

from bertonnx.runtime.core import engines, openvino_engine
from bertonnx.runtime.core.contract import INT8_MIN_COSINE, INT8_MIN_MEAN_COSINE
from bertonnx.runtime.core.errors import ArtifactError, BertOnnxError
from bertonnx.runtime.core.io import read_lines
from bertonnx.runtime.core.session import create_session

from . import agreement
from .calibrate import calibration_sentences

FILE = "model.openvino-int8.xml"     # and its weights, model.openvino-int8.bin
KEY = "openvino:int8"
BATCH = 8                            # calibration texts per NNCF sample
JOINED = 8                           # sentences per calibration passage
KEPT_DOWN = 1                        # the first layers' FFN down projections left fp32
SMOOTH_QUANT_ALPHA = 0.8             # NNCF's SmoothQuant alpha for MatMuls (its default: 0.95)


def missing() -> str | None:
    """The package an OpenVINO int8 graph needs and this environment lacks, or None."""
    return next((m for m in ("nncf", "openvino") if importlib.util.find_spec(m) is None), None)


def calibration_texts(path: Path | None = None) -> list[str]:
    """The sentences NNCF calibrates on, and the same joined into passages (docstring)."""
    sentences = ([text for _, text in read_lines(path)] if path is not None
                 else calibration_sentences())
    return sentences + [" ".join(sentences[i:i + JOINED])
                        for i in range(0, len(sentences), JOINED)]


def kept_fp32(model) -> list[str]:
    """The recipe's fp32 MatMuls in OpenVINO's reading of the graph: attention's core (no
    weight among its inputs) and the first KEPT_DOWN FFN down projections (the MatMuls after
    the first Gelus)."""
    def source(op, i):
        return op.input(i).get_source_output().get_node()

    matmuls = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    weights = ("Constant", "Convert")
    core = [op for op in matmuls if not any(source(op, i).get_type_name() in weights
                                             for i in range(op.get_input_size()))]
    down = [op for op in matmuls if source(op, 0).get_type_name() == "Gelu"]
    return [op.get_friendly_name() for op in core + down[:KEPT_DOWN]]


def _samples(task: str, tokenizer, max_len: int, texts: list[str]) -> list[dict]:
    """NNCF's calibration samples: the task's inputs (pairs where it takes pairs) made from the
    texts by the agreement gate's own builders, `BATCH` texts each."""
    out = []
    for i in range(0, len(texts), BATCH):
        chunk = texts[i:i + BATCH]
        pairs = list(zip(chunk, chunk[1:] + chunk[:1]))   # each text with the next one
        (ids, mask, tt), _ = agreement.task_batch(task, tokenizer, max_len, chunk, pairs)
        feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                 "token_type_ids": tt.numpy()}
        out.append({k: v.astype(np.int64) for k, v in feeds.items()})
    return out


def write(fused: Path, folder: Path, *, task: str, tokenizer, max_len: int,
          calibration: Path | None, say) -> dict:
    """NNCF's int8 of the fused fp32 graph at `fused`, written as `folder / FILE`; the
    manifest record's recipe part. NNCF runs in a child process: importing it changes the
    process's logging for good (it sets its own Logger class, and after a quantize the caller's
    warnings no longer reached pytest's handlers), and its progress bars write to stdout."""
    texts = calibration_texts(calibration)
    say(f"quantizing for OpenVINO (NNCF static int8, {len(texts)} calibration texts)")
    samples = _samples(task, tokenizer, max_len, texts)
    data = fused.with_name("calibration.npz")
    np.savez(data, **{f"{i}/{k}": v for i, sample in enumerate(samples)
                      for k, v in sample.items()})
    done = subprocess.run([sys.executable, "-m", __spec__.name, str(fused), str(data),
                           str(folder / FILE)], capture_output=True, text=True)
    data.unlink()
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise ArtifactError(f"NNCF could not quantize the graph for OpenVINO ({why})",
                            "export with --no-openvino-int8, or report it")
    made = json.loads(done.stdout.strip().splitlines()[-1])
    return {"file": FILE, "weights": FILE.replace(".xml", ".bin"),
            "recipe": f"nncf {made['nncf']} transformer preset, static int8; fp32: attention's "
                      f"core and the first FFN down projection ({made['kept']} MatMuls); "
                      f"SmoothQuant alpha {SMOOTH_QUANT_ALPHA}",
            "calibration": (f"{calibration.name}" if calibration is not None else
                            f"{len(texts)} texts: calibration_en.txt and its sentences joined "
                            f"{JOINED} at a time")}


def quantize(model, feeds: list[dict]):
    """The recipe (module docstring) on an OpenVINO model, calibrated on `feeds` (its inputs,
    one batch each): what an export writes, and what bench.openvino_int8 measures."""
    # export-only libraries (the nncf extra): imported where a graph is quantized
    import nncf
    from nncf.quantization.advanced_parameters import (AdvancedQuantizationParameters,
                                                       AdvancedSmoothQuantParameters)

    alphas = AdvancedSmoothQuantParameters(matmul=SMOOTH_QUANT_ALPHA)
    return nncf.quantize(model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER,
                         subset_size=len(feeds),
                         ignored_scope=nncf.IgnoredScope(names=kept_fp32(model)),
                         advanced_parameters=AdvancedQuantizationParameters(
                             smooth_quant_alphas=alphas))


def _quantize(fused: str, data: str, out: str) -> None:
    """The child process of `write`: NNCF on the graph with the calibration samples saved."""
    # export-only libraries, imported in this child only (write's docstring)
    import nncf
    import openvino as ov

    nncf.set_log_level(logging.ERROR)   # its INFO lines name every MatMul it leaves alone
    with np.load(data) as z:
        samples: dict[int, dict] = {}
        for key in z.files:
            i, name = key.split("/", 1)
            samples.setdefault(int(i), {})[name] = z[key]
    model = ov.Core().read_model(fused)
    names = {i.get_any_name() for i in model.inputs}   # a fused graph may lack token_type_ids
    kept = kept_fp32(model)
    # its progress bars (rich) on stdout, where this process answers
    with contextlib.redirect_stdout(io.StringIO()):
        quantized = quantize(model, [{k: v for k, v in samples[i].items() if k in names}
                                     for i in sorted(samples)])
    # fp32 as NNCF left it: save_model's default would halve every unquantized weight to fp16
    ov.save_model(quantized, out, compress_to_fp16=False)
    print(json.dumps({"nncf": nncf.__version__, "kept": len(kept)}))


def judge(reference, folder: Path, record: dict, row, say) -> dict:
    """The record with its parity: the int8 precision's own judge (task agreement with the
    fp32 torch model) on the OpenVINO graph, and, where the task measures cosine, CTranslate2's
    accuracy (contract.INT8_MIN_*) — what `auto` requires before it runs this graph."""
    if reference is None:
        return {**record, "passed": False, "note": "not judged (--no-parity)"}
    say("checking parity on openvino:int8")
    choice = engines.Choice("openvino", "int8", "export parity",
                            (engines.ENGINES["openvino"].provider,))
    try:
        sess = create_session(folder / record["file"], providers=choice,
                              memory_arena=False).inner
    except BertOnnxError as e:
        return {**record, "passed": False, "note": str(e)}
    figures = row.judge(reference, sess)
    metrics = figures.get("metrics", {})
    cosine_ok = ("cosine_mean" not in metrics or (
        metrics["cosine_mean"] >= INT8_MIN_MEAN_COSINE and
        metrics["cosine_min"] >= INT8_MIN_COSINE))
    return {**record, **figures, "passed": bool(figures.get("passed")) and cosine_ok,
            "hint": openvino_engine.openvino_hint("int8")}


if __name__ == "__main__":   # write's child process: `python -m` FUSED SAMPLES OUT
    _quantize(*sys.argv[1:4])
