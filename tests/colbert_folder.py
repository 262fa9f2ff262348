"""A ColBERT folder as PyLate saves one, written by hand beside a tiny encoder: the shared
`multi-vector` model of tests/conftest.py (SPECS). PyLate's own folders, made by pylate itself,
are tests/colbert_reference.py's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_colbert_files(folder: Path, hidden: int, seed: int, dim: int = 16) -> Path:
    """The files PyLate (pylate 1.6, models/colbert.py) saves beside its encoder, written by
    hand: modules.json (Transformer, pylate's Dense), a random hidden -> dim Dense, and
    config_sentence_transformers.json with Stanford's prefixes [unused0] / [unused1] (PyLate's
    own tests/colbert_reference.py folders are made by pylate itself)."""
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]
    (folder / "modules.json").write_text(json.dumps(modules), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 64, "do_lower_case": False}), encoding="utf-8")
    (folder / "1_Dense").mkdir(exist_ok=True)
    (folder / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": hidden, "out_features": dim, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False}),
        encoding="utf-8")
    weight = np.random.default_rng(seed).normal(0, 0.2, (dim, hidden)).astype(np.float32)
    save_file({"linear.weight": weight}, str(folder / "1_Dense" / "model.safetensors"))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"model_type": "ColBERT", "prompts": {"query": "", "document": ""},
         "default_prompt_name": None, "similarity_fn_name": "MaxSim",
         "query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 12,
         "document_length": 24, "attend_to_expansion_tokens": False,
         "skiplist_words": list(".,!?;:'\"-()"), "do_query_expansion": True}),
        encoding="utf-8")
    return folder
