"""The peers of the retrieval bench's classification task: transformers' `pipeline(
"text-classification")` — the call its users make — on each backend it takes, the same batch
size as every engine (32):

    transformers torch            the model as saved (fp32), and in torch.bfloat16
    + Optimum ONNX                ORTModelForSequenceClassification: its plain export, its O2
                                  graph, its dynamic int8 (optimum.py: the documented CPU path)
    + Optimum Intel OpenVINO      OVModelForSequenceClassification (export=True), OpenVINO's
                                  default precision here (bf16 on AMX) or f32 by its hint

They answer to the retrieval bench's peer keys (st-torch, st-onnx, ...: the same backends under
sentence-transformers, which has no single-text classifier), so `--peers` reads the same for
every task. Bench-only dependencies, imported when an engine is made; one missing is a
`Skipped` line. Reference: transformers' and Optimum's pipeline docs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from .engines import Engine, best_torch_threads
from .optimum import TASK, optimum_artifacts
from .peers import Skipped, _missing, int8_config, openvino_precision

BATCH = 32   # sentence-transformers' and bertonnx's default; a pipeline's default is 1
LIBRARY = "transformers"
# peer key -> (row label, backend, precision)
VARIANTS = {
    "st-torch": ("torch", "torch", "fp32"),
    "st-torch-bf16": ("torch bf16", "torch", "bf16"),
    "st-onnx": ("+ Optimum ONNX", "onnx", "fp32"),
    "st-onnx-o3": ("+ Optimum ONNX O2", "onnx", "fp32"),
    "st-onnx-int8": (f"+ Optimum ONNX int8 ({int8_config()})", "onnx", "int8"),
    "st-openvino": ("+ Optimum Intel OpenVINO", "openvino", "openvino"),
    "st-openvino-f32": ("+ Optimum Intel OpenVINO f32", "openvino", "f32"),
}
NEEDS = {"torch": "torch", "onnx": "optimum.onnxruntime", "openvino": "optimum.intel"}


def label_probs(labels: list[str]):
    """pipeline(..., top_k=None) results (each a list of {label, score}) -> (N, L) float32
    probabilities in the folder's label order (bertonnx's answers take the same form)."""
    column = {name: i for i, name in enumerate(labels)}

    def convert(results) -> np.ndarray:
        out = np.zeros((len(results), len(labels)), np.float32)
        for row, entries in zip(out, results):
            for e in entries:
                row[column[e["label"]]] = e["score"]
        return out
    return convert


def engines(source: Path, work: Path, threads: int, keys, labels: list[str], say
            ) -> tuple[list[Engine], list[Skipped]]:
    """The transformers rows among `keys` (VARIANTS), each on the folder its backend reads."""
    keys = [k for k in VARIANTS if k in keys]
    if keys and (why := _missing("transformers")):
        return [], [Skipped(LIBRARY, why)]
    found, skipped = [], []
    for key in keys:
        label, backend, precision = VARIANTS[key]
        if (why := _missing(NEEDS[backend])):
            skipped.append(Skipped(f"{LIBRARY} {label}", why))
            continue
        model, facts = _model(key, source, work, threads, say)
        if backend == "openvino":
            precision = f"{openvino_precision(model)} (OpenVINO's " + (
                "default here)" if key == "st-openvino" else "f32 hint)")
        found.append(_engine(f"{LIBRARY} {label}", model, source, precision, labels, facts))
    return found, skipped


def _model(key: str, source: Path, work: Path, threads: int, say):
    """The backend's model object for the pipeline, and what it set process-wide."""
    backend = VARIANTS[key][1]
    if backend == "torch":
        import torch  # the torch rows only
        from transformers import AutoModelForSequenceClassification

        dtype = torch.bfloat16 if key == "st-torch-bf16" else torch.float32
        model = AutoModelForSequenceClassification.from_pretrained(source, dtype=dtype).eval()
        n = best_torch_threads(model, threads, model.config.vocab_size)
        return model, {"torch_threads": f"torch threads {n}"}
    if backend == "onnx":
        from optimum.onnxruntime import ORTModelForSequenceClassification  # the ONNX rows only

        base = work / "optimum-classify"
        made = optimum_artifacts(source, base, False, say, int8_config())
        folder, file_name = {"st-onnx": (base / "optimum-plain", "model.onnx"),
                             "st-onnx-o3": made["fp32"], "st-onnx-int8": made["int8"]}[key]
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        return ORTModelForSequenceClassification.from_pretrained(
            folder, file_name=file_name, session_options=so), {}
    # the OpenVINO rows only; made before bertonnx's OpenVINO plugin loads (retrieval.py)
    from optimum.intel import OVModelForSequenceClassification

    folder = work / "openvino-classify"
    if not (folder / "openvino_model.xml").is_file():
        say(f"Optimum Intel OpenVINO export of {source.name} -> {folder}")
        OVModelForSequenceClassification.from_pretrained(source, export=True).save_pretrained(
            folder)
    config = {"INFERENCE_NUM_THREADS": threads}
    if key == "st-openvino-f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    return OVModelForSequenceClassification.from_pretrained(folder, ov_config=config), {}


def _engine(name: str, model, source: Path, precision: str, labels: list[str],
            facts: dict) -> Engine:
    from transformers import AutoTokenizer, pipeline  # bench-only, as every peer

    pipe = pipeline(TASK, model=model, tokenizer=AutoTokenizer.from_pretrained(source),
                    device="cpu")
    return Engine(name, precision=precision, facts=facts, answer=label_probs(labels),
                  e2e=lambda texts: pipe(texts, batch_size=BATCH, top_k=None))
