"""evidence.toml, read: the measurements behind the int8 choices, which the manifest quotes."""
from __future__ import annotations

import functools
import tomllib
from importlib import resources


@functools.cache
def evidence() -> dict:
    """The parsed evidence.toml (package data, read once per process)."""
    return tomllib.loads(resources.files(__package__).joinpath("evidence.toml")
                         .read_text(encoding="utf-8"))


def target_rationale(kind: str) -> str:
    """Why CPU kind `kind` tries its recipes in its order (the manifest's evidence)."""
    return evidence()["targets"][kind]["rationale"]


def default_settings_summary() -> str:
    """What DEFAULT_INT8 rests on, in one line (the manifest's evidence)."""
    return evidence()["default_settings"]["summary"]
