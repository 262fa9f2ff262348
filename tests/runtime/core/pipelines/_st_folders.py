"""Tiny sentence-transformers folders in both formats, for the parity tests.

`save_v5(checkpoint, out, ...)` builds a SentenceTransformer with sentence-transformers 5.7 on a
tiny random checkpoint (tests/conftest.py) and saves it: the format 5.4+ writes
(`sentence_transformers.base.modules...` types, `pooling_mode`, the maximum length in
tokenizer_config.json). `to_classic(v5, out)` rewrites such a folder as sentence-transformers
v2-v4 wrote it (`sentence_transformers.models.X`, `pooling_mode_*_tokens` booleans and
`word_embedding_dimension`, `max_seq_length`/`do_lower_case` in sentence_bert_config.json, a
Dense module's weights in pytorch_model.bin); sentence-transformers 5.7 reads both.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Transformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

from bertonnx.runtime.core.sentence_transformers import LEGACY_MODES

CLASSIC = "sentence_transformers.models."


def save_v5(checkpoint: Path, out: Path, modes, *, include_prompt: bool = True,
            dense: str | None = None, normalize: bool = False,
            max_seq_length: int | None = None, prompts=None,
            default_prompt_name: str | None = None, similarity: str | None = None) -> Path:
    """Transformer -> Pooling(modes) [-> Dense(torch.nn.`dense`, to 16)] [-> Normalize],
    saved by sentence-transformers 5.7 into `out`."""
    torch.manual_seed(0)   # the Dense layer's random weights
    encoder = Transformer(str(checkpoint), max_seq_length=max_seq_length)
    mods = [encoder, Pooling(encoder.get_embedding_dimension(), pooling_mode=modes,
                             include_prompt=include_prompt)]
    if dense is not None:
        mods.append(Dense(mods[1].get_embedding_dimension(), 16,
                          activation_function=getattr(torch.nn, dense)()))
    if normalize:
        mods.append(Normalize())
    SentenceTransformer(modules=mods, prompts=prompts, default_prompt_name=default_prompt_name,
                        similarity_fn_name=similarity, device="cpu").save(str(out))
    return out


def to_classic(v5: Path, out: Path, *, do_lower_case: bool = False) -> Path:
    """`v5` as sentence-transformers v2-v4 wrote it. With `do_lower_case` the tokenizer is made
    cased (its own lowercasing off), so only sentence_bert_config.json's flag lowercases."""
    shutil.copytree(v5, out)
    listed = json.loads((out / "modules.json").read_text())
    for m in listed:
        m["type"] = CLASSIC + m["type"].rsplit(".", 1)[-1]
    (out / "modules.json").write_text(json.dumps(listed, indent=2))
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    # v2-v4 kept the tokenizer's own length and wrote theirs in sentence_bert_config.json
    max_len, tok_config["model_max_length"] = tok_config["model_max_length"], 512
    (out / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": max_len, "do_lower_case": do_lower_case}))
    if do_lower_case:
        tok_config["do_lower_case"] = False
        tokenizer = json.loads((out / "tokenizer.json").read_text())
        tokenizer["normalizer"]["lowercase"] = False
        (out / "tokenizer.json").write_text(json.dumps(tokenizer))
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config))
    for m in listed[1:]:
        folder = out / m["path"]
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Pooling":
            config = json.loads((folder / "config.json").read_text())
            modes = config["pooling_mode"]
            modes = [modes] if isinstance(modes, str) else modes
            classic = {"word_embedding_dimension": config["embedding_dimension"],
                       **{k: v in modes for k, v in LEGACY_MODES.items()},
                       "include_prompt": config["include_prompt"]}
            (folder / "config.json").write_text(json.dumps(classic, indent=2))
        elif kind == "Dense":
            config = json.loads((folder / "config.json").read_text())
            for k in ("module_input_name", "module_output_name"):
                del config[k]
            (folder / "config.json").write_text(json.dumps(config, indent=2))
            torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
            (folder / "model.safetensors").unlink()
    st = json.loads((out / "config_sentence_transformers.json").read_text())
    st.pop("model_type", None)
    st["__version__"] = {"sentence_transformers": "3.0.1"}
    (out / "config_sentence_transformers.json").write_text(json.dumps(st, indent=2))
    return out
