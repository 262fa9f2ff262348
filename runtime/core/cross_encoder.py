"""A sentence-transformers CrossEncoder folder, read without torch: is it one, and which
activation turns its logits into scores.

A CrossEncoder is a sequence classifier (config.json `architectures` ...ForSequenceClassification)
saved with sentence-transformers' own files beside it, in one of three formats:

    v5+   config_sentence_transformers.json {"model_type": "CrossEncoder", "activation_fn": ...}
    v4    config.json {"sentence_transformers": {"activation_fn": ..., "version": ...}}
    < v4  config.json {"sbert_ce_default_activation_function": ...}

The activation is a dotted class path ("torch.nn.modules.activation.Sigmoid"). As
`CrossEncoder.__init__` resolves it (sentence_transformers/cross_encoder/model.py,
`_parse_model_config` then `get_default_activation_fn`): the v5 file's when set, else the v4
key, else the older one; a path outside `torch.` is not trusted (sentence-transformers warns and
uses the default; so do we); the default is Sigmoid for one label, Identity for more.

Its `max_length` needs nothing here: CrossEncoder keeps it as the tokenizer's
`model_max_length` (tokenizer_config.json, which an export copies byte for byte) capped at the
position table on load, which is the runtime's own limit (ExportFolder.max_length).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import ConfigError
from .files import read_json_object

log = logging.getLogger("bertonnx")

ST_CONFIG = "config_sentence_transformers.json"
# torch activation class -> its name among tasks.py's ACTIVATIONS (text-ranking's activation_fn;
# text-classification's FUNCTIONS for a CrossEncoder of several labels)
ACTIVATION_NAMES = {"Sigmoid": "sigmoid", "Identity": "identity", "Tanh": "tanh",
                    "Softmax": "softmax"}


@dataclass(frozen=True)
class CrossEncoderFolder:
    """What the runtime needs of a CrossEncoder folder: its activation (our name) and its
    label count."""

    path: Path
    activation: str
    num_labels: int


def _json(path: Path) -> dict:
    return read_json_object(path, "restore the file") if path.is_file() else {}


def label_count(config: Mapping) -> int:
    """config.json's labels: id2label's, else num_labels (transformers' default 2)."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    n = config.get("num_labels")
    return n if isinstance(n, int) and n > 0 else 2   # transformers' PretrainedConfig default


def _declared(path: Path, config: dict) -> tuple[bool, str | None]:
    """(whether the folder is a CrossEncoder, the activation path it names or None)."""
    st = _json(path / ST_CONFIG)
    v4 = config.get("sentence_transformers")
    older = config.get("sbert_ce_default_activation_function")
    ours = st.get("model_type") == "CrossEncoder"
    if not (ours or isinstance(v4, dict) or "sbert_ce_default_activation_function" in config):
        return False, None
    # config.json's keys are read only when the v5 file names none (or an untrusted one)
    legacy = v4["activation_fn"] if isinstance(v4, dict) and "activation_fn" in v4 else older
    for named in (st.get("activation_fn") if ours else None, legacy):
        if isinstance(named, str) and named:
            if named.startswith("torch."):
                return True, named
            log.warning("%s names the activation %s, which is not torch's; like "
                        "sentence-transformers without trust_remote_code, it is not used",
                        path, named)
    return True, None


def read_cross_encoder(path: str | Path) -> CrossEncoderFolder | None:
    """The folder's CrossEncoder settings, or None when it is not a CrossEncoder folder.
    ConfigError for an activation bertonnx does not compute."""
    path = Path(path)
    config = _json(path / "config.json")
    arches = config.get("architectures") or []
    if not any(isinstance(a, str) and a.endswith("ForSequenceClassification") for a in arches):
        return None
    found, named = _declared(path, config)
    if not found:
        return None
    n = label_count(config)
    if named is None:
        return CrossEncoderFolder(path, "sigmoid" if n == 1 else "identity", n)
    name = ACTIVATION_NAMES.get(named.rsplit(".", 1)[-1])
    if name is None:
        raise ConfigError(f"{path}: the CrossEncoder's activation {named} is not one bertonnx "
                          f"computes ({', '.join(ACTIVATION_NAMES)})",
                          "set activation_fn in its config_sentence_transformers.json to "
                          "torch.nn.modules.linear.Identity and apply yours to raw scores")
    return CrossEncoderFolder(path, name, n)


def folder_task(path: str | Path) -> str | None:
    """The task a CrossEncoder folder is exported for when none is named: reranking for one
    label (sentence-transformers' CrossEncoder.rank refuses more), text-classification of
    (query, document) pairs for several (CrossEncoder.predict: a score per label). None for
    any other folder."""
    ce = read_cross_encoder(path)
    if ce is None:
        return None
    return "text-ranking" if ce.num_labels == 1 else "text-classification"
