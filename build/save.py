"""Hugging Face folders out: config.json, model.safetensors and the tokenizer's files.

What `transformers.<Family>For<Task>.from_pretrained(folder)` (and AutoModelFor<Task>) loads
with no missing or unexpected keys. Loading is checkpoint.py's; this half is apart only so that
`Bert.save_pretrained` (heads.py) can call it without an import cycle: it takes a `Bert` but
reads it only through `model.config`, `model.hf_class` and `model.state_dict()`, and never
imports heads.py.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

# the one list of tokenizer files, shared with the runtime
from bertonnx.runtime.core.tokenizer import TOKENIZER_FILES

from .config import BertConfig
from .keys import key_table

__all__ = ["TOKENIZER_FILES", "write_config", "hf_state_dict", "copy_tokenizer_files",
           "save_pretrained"]


def write_config(config: BertConfig, hf_class: str, folder: str | Path) -> Path:
    """config.json as transformers writes it, naming `hf_class` in `architectures`."""
    hf = config.to_hf()
    hf["architectures"] = [hf_class]
    path = Path(folder) / "config.json"
    path.write_text(json.dumps(hf, indent=2) + "\n", encoding="utf-8")
    return path


def hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our weights by HF names, as `model.hf_class` names them (no `bert.`, `roberta.`, ...
    prefix for the bare BertModel, RobertaModel, ...), through the family's key table."""
    c = model.config
    bare = model.hf_class == c.family.class_prefix + "Model"
    keys = key_table(c.model_type, legacy=c.legacy)
    return {keys.to_hf(name, bare=bare): tensor.detach().contiguous().cpu()
            for name, tensor in model.state_dict().items()}


def copy_tokenizer_files(src: str | Path, out: str | Path) -> None:
    """Copy the tokenizer files `src` has into `out` (none is required)."""
    src, out = Path(src), Path(out)
    if src.resolve() == out.resolve():
        return
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)


def save_pretrained(model: nn.Module, out_dir: str | Path, *,
                    tokenizer_from: str | Path | None = None) -> Path:
    """config.json + model.safetensors in `out_dir` (created), plus the tokenizer files of
    `tokenizer_from` when given (`LoadedCheckpoint.save_pretrained` passes its source folder)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_config(model.config, model.hf_class, out)
    # metadata format=pt: transformers refuses safetensors files without it.
    save_file(hf_state_dict(model), out / "model.safetensors", metadata={"format": "pt"})
    if tokenizer_from is not None:
        copy_tokenizer_files(tokenizer_from, out)
    return out
