"""A sentence-transformers folder's settings carried into its export: the stack the runtime
computes after the encoder (runtime/core/sentence_transformers.py), recorded in the manifest,
and each Dense module's weights written beside the graph as float32 safetensors. A SparseEncoder
or CrossEncoder folder records how it reads text (maximum length, lowercasing, prompts) and no
modules: its pooling or head is in the graph.

A Dense module saved as pytorch_model.bin (sentence-transformers before 3) is a pickle: it is
read here, at export, with torch.load(weights_only=True), so the runtime never unpickles and
never needs torch. Reference: sentence-transformers 5.7 base/modules/dense.py (`linear.weight`,
`linear.bias`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file

from bertonnx.export.bge_m3 import carry_heads
from bertonnx.runtime.core.colbert import is_colbert_folder
from bertonnx.runtime.core.multi_vector_encoder import read_multi_vector
from bertonnx.runtime.core.cross_encoder import read_cross_encoder
from bertonnx.runtime.core.errors import ArtifactError, ConfigError
from bertonnx.runtime.core.sentence_modules import Dense, load_dense
from bertonnx.runtime.core.sentence_transformers import folder_task, read_folder
from bertonnx.runtime.core.sparse_encoder import is_splade_folder
from bertonnx.runtime.core.tasks import TASKS

# task -> whether a folder is of the sentence-transformers class that task exports
_MADE_FOR = {"feature-extraction": lambda src: folder_task(src) is not None,
             "sparse-embedding": is_splade_folder,
             "text-ranking": lambda src: read_cross_encoder(src) is not None,
             "text-classification": lambda src: read_cross_encoder(src) is not None}


def carry(source: Path | None, task: str, out: Path) -> dict:
    """The manifest's record of `source`'s settings (a SentenceTransformer's Dense weights
    written into `out`); empty unless `source` is a folder of the sentence-transformers class
    `task` exports."""
    if task == "multi-vector":
        return _carry_colbert(source, out)
    if task == "bge-m3":
        return carry_heads(source, out)
    if source is None or task not in _MADE_FOR or not _MADE_FOR[task](source):
        return {}
    stack = read_folder(source, task)
    if stack is None:   # a CrossEncoder saved before 5.4: no modules.json, no prompts
        return {}
    if "prompt_name" not in TASKS[task].parameters:
        # a CrossEncoder of several labels, exported for text-classification (no prompts)
        if stack.default_prompt_name and stack.prompts[stack.default_prompt_name]:
            raise ConfigError(f"{source} is a CrossEncoder whose default prompt "
                              f"({stack.default_prompt_name!r}) goes before every query, which "
                              f"bertonnx's {task} does not do",
                              "remove default_prompt_name from its "
                              "config_sentence_transformers.json and put the prompt before "
                              "each query yourself")
        return {}
    mods = []
    for m in stack.modules:
        if isinstance(m, Dense):
            m = _write_dense(m, source, out)
        mods.append(m)
    return replace(stack, modules=tuple(mods)).to_json()


def _carry_colbert(source: Path | None, out: Path) -> dict:
    """A PyLate ColBERT or sentence-transformers MultiVectorEncoder folder's settings and its
    Dense weights (the runtime needs both)."""
    if source is None or not is_colbert_folder(source):
        raise ConfigError(f"{source or 'the model'} is not a multi-vector folder "
                          "(config_sentence_transformers.json with model_type ColBERT or "
                          "MultiVectorEncoder)",
                          "export a folder PyLate saved (models.ColBERT(...).save(DIR)) or "
                          "sentence-transformers did (MultiVectorEncoder(...).save(DIR)) with "
                          "--task multi-vector")
    settings = read_multi_vector(source)
    mods = tuple(_write_dense(m, source, out) for m in settings.modules)
    return replace(settings, modules=mods).to_json()


def _write_dense(m: Dense, source: Path, out: Path) -> Dense:
    path = source / m.weights
    wanted = ("linear.weight", "linear.bias") if m.bias else ("linear.weight",)
    if m.residual and m.in_features != m.out_features:   # PyLate's projected residual
        wanted += ("residual.weight",)
    if path.suffix == ".bin":
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch's unpickling errors run to many lines
            raise ArtifactError(f"{path} cannot be read as weights ({type(e).__name__})",
                                "restore the file, or save the model again with "
                                "sentence-transformers (safetensors)") from None
        tensors = {k: v.detach().float().numpy() for k, v in state.items()
                   if isinstance(v, torch.Tensor)} if isinstance(state, dict) else {}
    else:
        tensors = _read_only(path, wanted)
    # a Stanford ColBERT's projection sits in the encoder's own weights file: carried alone,
    # into the folder PyLate would save it in
    parent = Path(m.weights).parent
    rel = ((parent if parent != Path(".") else Path("1_Dense")) / "model.safetensors").as_posix()
    missing = [k for k in wanted if k not in tensors]
    if missing:
        raise ArtifactError(f"{path} lacks {', '.join(missing)}", "restore the file")
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: np.ascontiguousarray(tensors[k], dtype=np.float32) for k in wanted},
              str(out / rel))
    carried = replace(m, weights=rel)
    load_dense(carried, out)   # the runtime's own reader and shape checks, on what it will read
    return carried


def _read_only(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The tensors `names` (those present) of a safetensors file, as float32: a Stanford
    ColBERT's projection is read without its encoder's weights, which share the file."""
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k).float().numpy() for k in names if k in f.keys()}
    except Exception as e:  # safetensors' own error types (header, truncation)
        raise ArtifactError(f"{path} is not a safetensors file ({type(e).__name__})",
                            "restore the file, or export the model again") from None
