"""A sentence-transformers folder read torch-free into its module stack (`SentenceStack`,
runtime/core/sentence_modules.py, which computes it in numpy).

What a SentenceTransformer does after its encoder, as the folder says, in both formats:

    modules.json               [{"idx", "name", "path", "type"}, ...], the encoder first
    sentence_bert_config.json  the Transformer's: v2-v4 `max_seq_length`, `do_lower_case`;
                               v5 `transformer_task`, `modality_config`, `module_output_name`
                               (its maximum length is tokenizer_config.json's model_max_length)
    N_Pooling/config.json      v2-v4 `word_embedding_dimension` + `pooling_mode_<mode>_token(s)`
                               booleans; v5 `embedding_dimension`, `pooling_mode` (a name or a
                               list), `include_prompt`
    N_Dense/config.json        in_features, out_features, bias, activation_function (+ v5
                               module_input_name, module_output_name); weights model.safetensors
                               or pytorch_model.bin (linear.weight, linear.bias)
    N_Normalize                nothing
    config_sentence_transformers.json   prompts, default_prompt_name, similarity_fn_name

v2-v4 name the classes `sentence_transformers.models.X`; 5.4+ writes
`sentence_transformers.base.modules.transformer.Transformer`,
`sentence_transformers.sentence_transformer.modules.pooling.Pooling`, ... A module or setting
the runtime would not reproduce is refused in one line, never skipped.

A SparseEncoder's folder (5.0-5.3: MLMTransformer, whose sentence_bert_config.json holds
max_seq_length; 5.4+: Transformer with transformer_task "fill-mask") and a CrossEncoder's
(transformer_task "sequence-classification") read text the same way: the same Transformer
config and prompts, read here by the same code (`read_folder(path, task)`), into a stack with
no modules (their pooling or head is in the graph). Reference: sentence-transformers 5.7
(sentence_transformer/modules/pooling.py, base/modules/dense.py, base/modules/transformer.py,
sentence_transformer/modules/normalize.py, base/model.py `_resolve_prompt`).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from .errors import ArtifactError
from .files import read_json_object
from .postprocess import SIMILARITIES
from .sentence_modules import (ACTIVATIONS, DEFAULT_PROMPTS, KINDS, SENTENCE, TOKENS, Dense,
                               Module, Normalize, Pooling, SentenceStack, check_modes,
                               check_order)

log = logging.getLogger("bertonnx")

MODULES_FILE = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"
# The classic booleans, in the order sentence-transformers concatenates their vectors
# (pooling.py `_LEGACY_POOLING_MODE_KWARGS`).
LEGACY_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                "pooling_mode_mean_tokens": "mean",
                "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                "pooling_mode_weightedmean_tokens": "weightedmean",
                "pooling_mode_lasttoken": "lasttoken"}
# The Transformer module's `transformer_task` whose output is token vectors (its AutoModel)
TOKEN_FEATURES = "feature-extraction"
# The model classes whose folders read text this way, by the task bertonnx exports them for:
# (the Transformer module's transformer_task, the prompt names every model of the class has:
# `_default_prompts` of sentence_transformer/model.py, sparse_encoder/model.py, base/model.py)
MODEL_CLASSES = {"feature-extraction": (TOKEN_FEATURES, DEFAULT_PROMPTS),   # SentenceTransformer
                 "sparse-embedding": ("fill-mask", DEFAULT_PROMPTS),        # SparseEncoder
                 "text-ranking": ("sequence-classification", {}),           # CrossEncoder
                 "text-classification": ("sequence-classification", {})}    # CrossEncoder
# the first module of a folder: the encoder (MLMTransformer: SparseEncoder 5.0-5.3's)
ENCODERS = ("Transformer", "MLMTransformer")
# The Transformer module's config file, by the names older releases gave it (transformer.py)
TRANSFORMER_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json",
                       "sentence_distilbert_config.json", "sentence_camembert_config.json",
                       "sentence_albert_config.json", "sentence_xlm-roberta_config.json")


# -- reading a folder ------------------------------------------------------------------------


def read_modules(path: Path) -> list[tuple[str, str]] | None:
    """modules.json as (class name, path) pairs; None when the folder has none."""
    listed = Path(path) / MODULES_FILE
    if not listed.is_file():
        return None
    try:
        data = json.loads(listed.read_text(encoding="utf-8"))
        out = [(str(m["type"]), str(m.get("path", ""))) for m in data]
    except (ValueError, TypeError, KeyError) as e:
        raise ArtifactError(f"{listed} is not a sentence-transformers module list ({e})",
                            "restore the file, or remove it") from None
    return out


def folder_task(path: Path) -> str | None:
    """The task a sentence-transformers folder is for: feature-extraction for a
    SentenceTransformer (modules.json lists a Pooling module; config_sentence_transformers.json,
    where present, says model_type SentenceTransformer or nothing); None for any other folder
    (a CrossEncoder's or a SparseEncoder's has no Pooling, and says its model_type)."""
    path = Path(path)
    listed = read_modules(path)
    if not listed or not any(t.rsplit(".", 1)[-1] == "Pooling" for t, _ in listed):
        return None
    config = path / ST_CONFIG
    model_type = (read_json_object(config, "restore the file").get("model_type")
                  if config.is_file() else None)
    return "feature-extraction" if model_type in (None, "SentenceTransformer") else None


def read_folder(path: Path, task: str = TOKEN_FEATURES) -> SentenceStack | None:
    """What a sentence-transformers folder declares for `task` (a MODEL_CLASSES key): for
    feature-extraction its modules after the encoder, for the others none; for each, how it
    reads text (maximum length, lowercasing, prompts). None without modules.json; an
    ArtifactError names a module or setting the runtime would not reproduce."""
    path = Path(path)
    listed = read_modules(path)
    if listed is None:
        return None
    where = path / MODULES_FILE
    names = [t.rsplit(".", 1)[-1] for t, _ in listed]
    if not listed or names[0] not in ENCODERS or listed[0][1] not in ("", "."):
        raise ArtifactError(f"{where} does not start with a Transformer module at the folder's "
                            "root", "re-save it with sentence-transformers "
                            "(SentenceTransformer(DIR).save(NEW_DIR)) and export that")
    classic = any(t.startswith("sentence_transformers.models.") for t, _ in listed)
    transformer_task, prompts = MODEL_CLASSES[task]
    max_len, lower = _transformer(path, transformer_task)
    mods = _modules(path, listed[1:], where) if task == TOKEN_FEATURES else ()
    stack = SentenceStack(mods, max_len, lower, **_model_config(path, prompts),
                          format="v2-v4" if classic else "v5")
    if task == TOKEN_FEATURES:
        check_order(stack, where)
    return stack


def _modules(path: Path, listed: list[tuple[str, str]], where: Path) -> tuple[Module, ...]:
    """A SentenceTransformer's modules after its encoder (Dropout: the identity at inference)."""
    mods: list[Module] = []
    for kind, rel in listed:
        name = kind.rsplit(".", 1)[-1]
        if not kind.startswith("sentence_transformers.") or name not in (*KINDS, "Dropout"):
            raise ArtifactError(f"{where} lists module {kind}, which bertonnx does not compute",
                                "export a folder made of Transformer, Pooling, Dense and "
                                "Normalize modules")
        if name == "Pooling":
            mods.append(_pooling(path / rel / "config.json"))
        elif name == "Dense":
            mods.append(_dense(path, rel))
        elif name == "Normalize":
            mods.append(Normalize())
    return tuple(mods)


def _model_config(path: Path, default_prompts: dict) -> dict:
    """config_sentence_transformers.json's prompts (over the class's `default_prompts`),
    default prompt and similarity function, as SentenceStack fields."""
    config = path / ST_CONFIG
    st = read_json_object(config, "restore the file") if config.is_file() else {}
    prompts = st.get("prompts") or {}
    default = st.get("default_prompt_name")
    if not (isinstance(prompts, dict) and all(isinstance(v, (str, type(None)))
                                              for v in prompts.values())):
        raise ArtifactError(f"{config} has prompts that are not strings", "restore the file")
    prompts = {**default_prompts, **{k: v or "" for k, v in prompts.items()}}
    if default is not None and default not in prompts:
        raise ArtifactError(f"{config}: default prompt {default!r} is not one of its prompts",
                            "restore the file")
    similarity = st.get("similarity_fn_name") or "cosine"
    if similarity not in SIMILARITIES:
        raise ArtifactError(f"{config} names similarity function {similarity!r}",
                            f"use one of {', '.join(SIMILARITIES)}")
    return {"prompts": prompts, "default_prompt_name": default,
            "similarity_fn_name": similarity}


def _transformer(path: Path, expected: str) -> tuple[int | None, bool]:
    """The Transformer module's maximum length and lowercasing (sentence_bert_config.json);
    ArtifactError when it runs another transformer_task than `expected` (or, for token
    features, answers something else)."""
    config = next((path / n for n in TRANSFORMER_CONFIGS if (path / n).is_file()), None)
    data = read_json_object(config, "restore the file") if config else {}
    task = data.get("transformer_task", expected)
    out = data.get("module_output_name", TOKENS)
    if task != expected or (expected == TOKEN_FEATURES and out != TOKENS):
        got = f"gives {out} ({task}), not token embeddings" if expected == TOKEN_FEATURES \
            else f"runs {task}, not the {expected} this kind of folder holds"
        raise ArtifactError(f"{config}'s Transformer {got}",
                            "export it for the task its encoder was made for")
    kwargs = {**(data.get("processing_kwargs") or {}).get("common", {}),
              **(data.get("processing_kwargs") or {}).get("text", {})}
    limit = next((v for v in (kwargs.get("max_length"),
                              (data.get("processor_kwargs") or data.get("tokenizer_args")
                               or {}).get("model_max_length"),
                              data.get("max_seq_length")) if v is not None), None)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ArtifactError(f"{config} sets a maximum length of {limit!r}", "restore the file")
    return limit, data.get("do_lower_case") is True


def _pooling(config: Path) -> Pooling:
    data = read_json_object(config, "restore the file") if config.is_file() else {}
    mode = data.get("pooling_mode")
    if mode is None:   # v2-v4: booleans, in concatenation order; none set means mean
        modes = tuple(m for k, m in LEGACY_MODES.items() if data.get(k) is True) or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    check_modes(modes, config)
    dim = data.get("embedding_dimension", data.get("word_embedding_dimension"))
    return Pooling(modes, data.get("include_prompt", True) is not False, dim)


def _dense(path: Path, rel: str) -> Dense:
    folder = path / rel
    config = folder / "config.json"
    if not config.is_file():
        raise ArtifactError(f"{config} is missing", "copy the whole sentence-transformers folder")
    data = read_json_object(config, "restore the file")
    name = str(data.get("activation_function") or "torch.nn.modules.activation.Tanh")
    if not name.startswith("torch."):
        # sentence-transformers (dense.py `load`) uses Tanh for an untrusted path
        log.warning("%s names activation %s; sentence-transformers uses Tanh in its place "
                    "unless trust_remote_code, and so does bertonnx", config, name)
        name = "Tanh"
    act = name.rsplit(".", 1)[-1]
    if act not in ACTIVATIONS:
        raise ArtifactError(f"{config} names activation {name}, which bertonnx does not "
                            f"compute", f"use one of {', '.join(ACTIVATIONS)}")
    weights = next((f"{rel}/{n}".lstrip("/") for n in ("model.safetensors", "pytorch_model.bin")
                    if (folder / n).is_file()), None)
    if weights is None:
        raise ArtifactError(f"{folder} holds no model.safetensors or pytorch_model.bin",
                            "copy the whole sentence-transformers folder")
    names = {k: data.get(k, SENTENCE) for k in ("module_input_name", "module_output_name")}
    if data.get("module_output_name") is None:
        names["module_output_name"] = names["module_input_name"]
    if not set(names.values()) <= {TOKENS, SENTENCE}:
        raise ArtifactError(f"{config} reads or writes {sorted(names.values())}, which bertonnx "
                            "does not compute", f"use {SENTENCE} or {TOKENS}")
    try:
        return Dense(int(data["in_features"]), int(data["out_features"]),
                     data.get("bias", True) is not False, act, weights, **names)
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"{config} lacks in_features/out_features ({e!r})",
                            "restore the file") from None


def matryoshka_dimensions(path: Path) -> tuple[int, ...]:
    """The vector sizes a model folder says it was trained to be cut to (Matryoshka):
    `matryoshka_dimensions` in config_sentence_transformers.json, else in config.json; () when
    neither declares any (every size is then allowed, as sentence-transformers' truncate_dim
    allows any: it checks none)."""
    for name in (ST_CONFIG, "config.json"):
        config = Path(path) / name
        if not config.is_file():
            continue
        sizes = read_json_object(config, "restore the file").get("matryoshka_dimensions")
        if sizes is None:
            continue
        if not isinstance(sizes, list) or not sizes or not all(
                isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in sizes):
            raise ArtifactError(f"{config}'s matryoshka_dimensions is not a list of positive "
                                f"integers: {str(sizes)[:60]}", "fix or remove the field")
        return tuple(sorted(set(sizes), reverse=True))
    return ()
