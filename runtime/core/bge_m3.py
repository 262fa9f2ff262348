"""A BGE-M3 folder read torch-free: the two heads FlagEmbedding puts on the encoder (bge-m3).

FlagEmbedding 1.4 (`BGEM3FlagModel`; finetune/embedder/encoder_only/m3: runner.py get_model,
modeling.py) reads a folder of an XLM-RoBERTa `XLMRobertaModel` and two torch-pickled state
dicts beside it:

    colbert_linear.pt    Linear(H, D) (weight, bias): each token's multi-vector projection
    sparse_linear.pt     Linear(H, 1) (weight, bias): each token's lexical weight

and answers three things from one forward pass (EncoderOnlyEmbedderM3ModelForInference):
dense = the [CLS] (<s>) vector, normalized; lexical weights = relu(sparse_linear(h)) per token,
the largest per token id, the cls/eos/pad/unk ids and weights of 0 left out; colbert vectors =
colbert_linear on every attended token after [CLS], normalized. The export reads the .pt files
once, as weights only (export/bge_m3.py), and writes both heads as one float32
safetensors file, which the runtime reads (pipelines/bge_m3.py); the manifest records it
(`M3Settings.to_json`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ArtifactError
from .sentence_modules import read_safetensors

HEAD_FILES = ("colbert_linear.pt", "sparse_linear.pt")   # in the model folder, as saved
WEIGHTS = "bge_m3_heads.safetensors"                      # in the export folder
TENSORS = ("colbert.weight", "colbert.bias", "sparse.weight", "sparse.bias")
RECORD_VERSION = 1              # the manifest's record; newer ones are refused


def is_bge_m3_folder(path: str | Path) -> bool:
    """Whether `path` holds FlagEmbedding's two M3 head files (a BGE-M3 folder)."""
    return all((Path(path) / name).is_file() for name in HEAD_FILES)


@dataclass(frozen=True)
class M3Heads:
    """The two heads' float32 weights: colbert (D, H) + (D,), sparse (1, H) + (1,)."""

    colbert_weight: np.ndarray
    colbert_bias: np.ndarray
    sparse_weight: np.ndarray
    sparse_bias: np.ndarray

    def __post_init__(self):
        d, h = self.colbert_weight.shape
        if (self.colbert_bias.shape != (d,) or self.sparse_weight.shape != (1, h)
                or self.sparse_bias.shape != (1,)):
            raise ArtifactError(
                f"BGE-M3 heads of shapes colbert {self.colbert_weight.shape} + "
                f"{self.colbert_bias.shape}, sparse {self.sparse_weight.shape} + "
                f"{self.sparse_bias.shape} are not Linear(H, D) and Linear(H, 1)",
                "restore colbert_linear.pt and sparse_linear.pt, and export again")

    @property
    def hidden_size(self) -> int:
        return self.colbert_weight.shape[1]

    def tensors(self) -> dict[str, np.ndarray]:
        return dict(zip(TENSORS, (self.colbert_weight, self.colbert_bias, self.sparse_weight,
                                  self.sparse_bias)))

    def to_json(self) -> dict:
        return {"version": RECORD_VERSION,
                "bge_m3": {"weights": WEIGHTS, "colbert_dim": int(self.colbert_weight.shape[0])}}


def read_heads(folder: Path, record: dict, where) -> M3Heads:
    """The heads an export recorded (`record`: its manifest's) from its safetensors file."""
    try:
        if record.get("version", 0) > RECORD_VERSION:
            raise ArtifactError(f"{where} records a BGE-M3 record of version "
                                f"{record['version']}, which this bertonnx cannot read",
                                "upgrade bertonnx, or export the model again")
        name = record["bge_m3"]["weights"]
    except (KeyError, TypeError, AttributeError) as e:
        raise ArtifactError(f"{where} has a damaged BGE-M3 record ({e!r})",
                            "export the model again") from None
    tensors = read_safetensors(folder / name)
    missing = [k for k in TENSORS if k not in tensors]
    if missing:
        raise ArtifactError(f"{folder / name} lacks {', '.join(missing)}",
                            "export the model again")
    return M3Heads(*(np.ascontiguousarray(tensors[k], np.float32) for k in TENSORS))
