"""The Optimum baseline: its documented CPU path, then an ORTModel inside a transformers pipeline.

    checkpoint ─ ORTModel export ─┬─ ORTOptimizer O2 (fp32)             → "Optimum O2 (fp32)"
                                  └─ ORTQuantizer dynamic int8 (avx2)    → "Optimum int8"

The int8 is made from the plain export: ORTQuantizer on the O2 graph is tried first and its
failure recorded (it cannot type the fused graph's tensors: "Unable to find data type for
weight_name ..."). Optimum is the optional `bench` extra; public APIs only.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import onnxruntime as ort

from bertonnx.runtime.core.tokenizer import TOKENIZER_FILES

from .engines import Engine, hf_pipeline_engine
from .inputs import model_max_length

TASK = "text-classification"  # ORTModelForSequenceClassification: the comparison's one task
# The AutoQuantizationConfig Optimum documents per CPU kind (runtime/core/cpu.py's kinds; it has
# none for AMX, whose CPUs also have AVX-512 VNNI)
OPTIMUM_CONFIG = {"amx": "avx512_vnni", "avx512-vnni": "avx512_vnni", "avx512": "avx512",
                  "avx2": "avx2", None: "avx2"}


def optimum_artifacts(ckpt: Path, work: Path, fresh: bool, say=lambda m: None,
                      int8_config: str = "avx2", o2: bool = True) -> dict:
    """Optimum's documented CPU path: export, O2-optimise (fp32), dynamic int8 with the
    `AutoQuantizationConfig` Optimum documents for the CPU (`int8_config`: avx2, avx512,
    avx512_vnni; per_channel=False as in its examples).

    `o2=False`: no ORTOptimizer (a model it cannot optimise in this machine's memory): the
    fp32 entry is the plain export.

    Returns {"fp32": (dir, file), "int8": (dir, file), "notes": [...], "o2": bool}."""
    # Optimum (the bench extra) only when it is compared: compare.py checks has_optimum first
    from optimum.onnxruntime import ORTModelForSequenceClassification, ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig, AutoQuantizationConfig

    plain, o2_dir = work / "optimum-plain", work / "optimum-O2"
    int8 = work / ("optimum-int8" if int8_config == "avx2" else f"optimum-int8-{int8_config}")
    notes = []
    if fresh:
        for d in (plain, o2_dir, int8):
            shutil.rmtree(d, ignore_errors=True)
    if not (plain / "model.onnx").is_file():
        say("optimum export")
        m = ORTModelForSequenceClassification.from_pretrained(ckpt, export=True)
        m.save_pretrained(plain)
        _copy_tokenizer(ckpt, plain)
    if o2 and not (o2_dir / "model_optimized.onnx").is_file():
        say("optimum O2 optimisation")
        m = ORTModelForSequenceClassification.from_pretrained(plain)
        ORTOptimizer.from_pretrained(m).optimize(save_dir=o2_dir,
                                                 optimization_config=AutoOptimizationConfig.O2())
        _copy_tokenizer(ckpt, o2_dir)
    if not (int8 / "model_quantized.onnx").is_file():
        qc = getattr(AutoQuantizationConfig, int8_config)(is_static=False, per_channel=False)
        try:  # the fused graph first: the obvious path, and the one that fails
            if o2:
                ORTQuantizer.from_pretrained(o2_dir, file_name="model_optimized.onnx").quantize(
                    save_dir=work / "optimum-O2-int8", quantization_config=qc)
                notes.append("ORTQuantizer on the O2 graph worked")
        except Exception as e:  # noqa: BLE001 — recorded, then the working path is taken
            notes.append(f"ORTQuantizer on the O2 graph failed: {str(e).splitlines()[0][:160]}")
        shutil.rmtree(work / "optimum-O2-int8", ignore_errors=True)
        say(f"optimum int8 (dynamic, {int8_config} config, of the plain export)")
        ORTQuantizer.from_pretrained(plain, file_name="model.onnx").quantize(
            save_dir=int8, quantization_config=qc)
        _copy_tokenizer(ckpt, int8)
        (int8 / "optimum-notes.json").write_text(json.dumps(notes))
    elif (int8 / "optimum-notes.json").is_file():
        notes = json.loads((int8 / "optimum-notes.json").read_text())
    fp32 = (o2_dir, "model_optimized.onnx") if o2 else (plain, "model.onnx")
    return {"fp32": fp32, "int8": (int8, "model_quantized.onnx"), "notes": notes,
            "o2": o2}


def _copy_tokenizer(src: Path, dst: Path) -> None:
    for name in TOKENIZER_FILES:
        if (src / name).is_file() and not (dst / name).is_file():
            shutil.copy2(src / name, dst / name)


def optimum_engine(name: str, folder: Path, file_name: str, inputs: list, threads: int,
                   batch_sizes: tuple[int, ...], precision: str = "fp32") -> Engine:
    """ORTModel inside a transformers pipeline (end to end) and ORTModel's own session (model
    only), at our thread count: Optimum as its users run it. (Until 2026-11-23 the model-only
    row ran Optimum's graph in bertonnx's session factory, which since keeps onnxruntime from
    fusing the residual norms into its slow CPU SkipLayerNormalization — a gain Optimum's
    users do not get.)"""
    # Optimum (the bench extra) and transformers only when Optimum is compared
    from optimum.onnxruntime import ORTModelForSequenceClassification
    from transformers import AutoTokenizer, pipeline

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    model = ORTModelForSequenceClassification.from_pretrained(folder, file_name=file_name,
                                                              session_options=so)
    tok = AutoTokenizer.from_pretrained(folder)
    engine = hf_pipeline_engine(
        name, lambda bs: pipeline(TASK, model=model, tokenizer=tok, device=-1, batch_size=bs),
        TASK, inputs, batch_sizes, model_max_length(folder))
    session = model.session
    names = [i.name for i in session.get_inputs()]
    engine.forward = lambda feeds: session.run(None, {n: feeds[n] for n in names})
    engine.precision = precision
    return engine


def optimum_script_argv(folder: Path, file_name: str, text: str) -> list[str]:
    """The cold-start counterpart of `bertonnx classify`: an Optimum pipeline script."""
    code = ("import sys\n"
            "from optimum.onnxruntime import ORTModelForSequenceClassification\n"
            "from transformers import AutoTokenizer, pipeline\n"
            "m = ORTModelForSequenceClassification.from_pretrained(sys.argv[1], "
            "file_name=sys.argv[2])\n"
            "p = pipeline('text-classification', model=m, "
            "tokenizer=AutoTokenizer.from_pretrained(sys.argv[1]))\n"
            "print(p(sys.argv[3]))\n")
    return [sys.executable, "-c", code, str(folder), file_name, text]
