"""A sentence-vector export's record of its vectors (the manifest's `embeddings`): the Matryoshka
sizes its model folder declares, and per-dimension ranges for int8/uint8 quantization.

The ranges are sentence-transformers' `calibration_embeddings` made once, at export: the
minimum and maximum of each dimension of the export's own default vectors (its pooling,
normalize, default prompt; the CPU provider) for the 300 WordNet sentences of
calibration_en.txt, in the order of the file. So they are deterministic, and a text's int8
codes never depend on the other texts of its request (a server that calibrated on each request,
as `quantize_embeddings` does without ranges, would give a text other codes in another batch).
They are recorded for the full width and for each declared Matryoshka size, on the vectors cut
to that size (and renormalized when the defaults normalize): a cut vector is quantized with its
own ranges, never with the first k of the full vector's (renormalizing moves every value).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bertonnx.runtime.core.pipelines import load
from bertonnx.runtime.core.postprocess import l2_normalize
from bertonnx.runtime.core.quantize_embeddings import calibrate
from bertonnx.runtime.core.sentence_transformers import matryoshka_dimensions
from bertonnx.runtime.core.tasks import TASKS

CALIBRATION_TEXT = Path(__file__).with_name("calibration_en.txt")
BATCH = 32


def calibration_sentences() -> list[str]:
    lines = CALIBRATION_TEXT.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def record(task: str, folder: Path, source: Path | None, say=lambda msg: None) -> dict:
    """The manifest's `embeddings` for the export written in `folder` ({} for a task whose
    answers are not sentence vectors)."""
    if not TASKS[task].vector_output:
        return {}
    say("calibrating the int8 embedding ranges on real text")
    sizes = matryoshka_dimensions(source) if source is not None else ()
    pipe = load(folder, providers="cpu")
    vectors = np.asarray(pipe(calibration_sentences(), return_tensors=True, batch_size=BATCH),
                         dtype=np.float32)
    normalize = pipe.defaults["normalize"]
    width = vectors.shape[1]
    ranges = {str(width): calibrate(vectors).tolist()}
    for k in sizes:
        if k < width:
            cut = vectors[:, :k]
            ranges[str(k)] = calibrate(l2_normalize(cut) if normalize else cut).tolist()
    return {"matryoshka_dimensions": list(sizes), "ranges": ranges,
            "calibration": f"{len(vectors)} sentences of {CALIBRATION_TEXT.name}, the export's "
                           "default vectors on the CPU provider"}
