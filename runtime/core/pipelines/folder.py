"""An export folder read and checked, which a pipeline is built from: the manifest (sha256
verified), config.json and the tokenizer — or a folder made elsewhere (runtime/core/foreign.py),
read by its own rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..contract import MANIFEST_NAME, MODEL_NAME
from ..errors import ArtifactError
from ..families import usable_positions
from ..files import read_json_object
from ..foreign import ForeignFolder, read_foreign
from ..manifest import Manifest
from ..schema import CONFIG_RULES, check_values
from ..tokenizer import WordPieceTokenizer, load_tokenizer


@dataclass
class ExportFolder:
    """An export folder read and checked: manifest (sha256 verified), config.json, tokenizer;
    or a folder made elsewhere (runtime/core/foreign.py), which has no manifest to check."""

    path: Path
    manifest: Manifest
    config: dict
    tokenizer: WordPieceTokenizer
    tokenizer_config: dict
    model_file: str = MODEL_NAME
    foreign: ForeignFolder | None = None

    @classmethod
    def read(cls, path: str | Path, manifest: Manifest | None = None, *,
             task: str | None = None) -> "ExportFolder":
        """`task` names the task of a folder made elsewhere when its config.json does not."""
        path = Path(path)
        foreign = read_foreign(path, task) if manifest is None else None
        if foreign is not None:
            manifest, config = foreign.manifest, foreign.config
        else:
            manifest = manifest or Manifest.read(path)
            config = check_values(_read_json(path / "config.json"), CONFIG_RULES,
                                  path / "config.json")
        tokenizer = load_tokenizer(path)  # reads tokenizer_config.json once, for both
        return cls(path, manifest, config, tokenizer, tokenizer.config,
                   foreign.model_file if foreign else MODEL_NAME, foreign)

    @property
    def model_path(self) -> Path:
        return self.path / self.model_file

    @property
    def max_length(self) -> int:
        """Longest sequence the model takes: its usable positions, capped by the tokenizer's."""
        limits = [usable_positions(self.config), self.tokenizer.model_max_length]
        limits = [n for n in limits if isinstance(n, int) and n > 0]
        return min(limits) if limits else 512

    def settings_record(self, what: str, fix: str) -> tuple[dict, Path]:
        """The settings export recorded from the source folder's modules (the manifest's
        `sentence_transformers`) and where they live; a one-line ArtifactError naming `what`
        when there are none (a folder made elsewhere has no manifest to hold them)."""
        where = self.path / MANIFEST_NAME
        record = self.manifest.sentence_transformers if self.foreign is None else {}
        if not record:
            raise ArtifactError(f"{where} records no {what}", fix)
        return record, where

    @property
    def id2label(self) -> dict[int, str]:
        raw = self.config.get("id2label") or self.manifest.config.get("id2label") or {}
        return {int(k): str(v) for k, v in raw.items()}


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ArtifactError(f"{path} is missing from the export", "export the model again")
    return read_json_object(path, "export the model again")
