"""Reading the JSON files of model and export folders (config, tokenizer config, manifest).

One reader so every such file fails the same way: an `ArtifactError` naming the file when it is
not JSON or not an object. Whether a missing file is an error, and what it means, stays with
the caller, which knows what the file is for.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import ArtifactError


def read_json_object(path: Path, fix: str, *, what: str = "a JSON object") -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{path} is not valid JSON ({e})", fix) from e
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} is not {what}", fix)
    return data
