"""The types of the config values the runtime reads, checked once when a folder is read.

A model folder's config.json and tokenizer_config.json are plain JSON anyone can edit; a value
of the wrong type (an `id2label` list, `"max_position_embeddings": "512"`, `"do_lower_case":
"no"`) would otherwise surface as an IndexError or a TypeError deep in a call, or worse be
read silently as something else. One table per file: key -> (rule, what the rule wants). Only
keys the runtime reads are listed, so real Hugging Face files (with many other keys) pass.
Every failure is one `ArtifactError` naming the file and the key.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .errors import ArtifactError


def _int(low: int = 0) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _bool(v) -> bool:
    return isinstance(v, bool)


def _str(v) -> bool:
    return isinstance(v, str)


def _or_none(rule) -> Callable[[Any], bool]:
    return lambda v: v is None or rule(v)


def _token(v) -> bool:
    """A special token as saved: a str, or an AddedToken dict with its content."""
    return isinstance(v, str) or (isinstance(v, dict) and isinstance(v.get("content"), str))


def _list_of(rule) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(rule(x) for x in v)


def _dense_labels(v) -> bool:
    """id2label as transformers writes it: {"0": name, ..., "n-1": name}, every id once."""
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        return False
    keys = [k.strip() for k in v]
    return all(k.isdigit() for k in keys) and sorted(map(int, keys)) == list(range(len(v)))


def _label_ids(v) -> bool:
    return isinstance(v, dict) and all(_int()(i) for i in v.values())


# config.json: what the pipelines, the contract and the foreign-folder reader use
CONFIG_RULES: dict[str, tuple[Callable, str]] = {
    "id2label": (_dense_labels, 'an object {"0": "label", ...} with ids 0..n-1 once each'),
    "label2id": (_label_ids, 'an object {"label": id, ...}'),
    "num_labels": (_int(1), "a positive integer"),
    "problem_type": (_or_none(_str), "a string or null"),
    "max_position_embeddings": (_int(1), "a positive integer"),
    "model_type": (_str, "a string"),
    "pad_token_id": (_or_none(_int()), "a non-negative integer or null"),
    "vocab_size": (_int(1), "a positive integer"),
    "hidden_size": (_int(1), "a positive integer"),
    "architectures": (_or_none(_list_of(_str)), "a list of class names"),
}

# tokenizer_config.json: what tokenizer.py and tokenizer_families.py apply
_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
           "mask_token")
TOKENIZER_CONFIG_RULES: dict[str, tuple[Callable, str]] = {
    "tokenizer_class": (_or_none(_str), "a class name or null"),
    "do_lower_case": (_bool, "true or false"),
    "strip_accents": (_or_none(_bool), "true, false or null"),
    "tokenize_chinese_chars": (_bool, "true or false"),
    "clean_text": (_bool, "true or false"),
    "add_prefix_space": (_bool, "true or false"),
    "trim_offsets": (_bool, "true or false"),
    "clean_up_tokenization_spaces": (_bool, "true or false"),
    "model_input_names": (_list_of(_str), "a list of input names"),
    "additional_special_tokens": (_or_none(_list_of(_token)), "a list of tokens"),
    "added_tokens_decoder": (lambda v: isinstance(v, dict) and all(map(_token, v.values())),
                             'an object {"id": {"content": ...}, ...}'),
    "model_max_length": (lambda v: v is None or (isinstance(v, (int, float))
                                                 and not isinstance(v, bool) and v > 0),
                         "a positive number"),
    **{t: (_or_none(_token), "a token string, an AddedToken object or null") for t in _TOKENS},
}
SPECIAL_TOKENS_MAP_RULES = {t: TOKENIZER_CONFIG_RULES[t] for t in
                            (*_TOKENS, "additional_special_tokens")}


def check_values(data: dict, rules: dict[str, tuple[Callable, str]], path: Path) -> dict:
    """`data` (read from `path`) with every key of `rules` it holds of the right type."""
    for key, (ok, want) in rules.items():
        if key in data and not ok(data[key]):
            raise ArtifactError(f"{path} has {key} = {_show(data[key])}, which is not {want}",
                                f"restore {Path(path).name}, or export the model again")
    return data


def _show(v) -> str:
    text = json.dumps(v, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
