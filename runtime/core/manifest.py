"""`bertonnx.json`, the export manifest: what was exported, how, and the proof that it holds.

Written by export (`Manifest.write`), read and verified by the runtime (`Manifest.read`):
schema version, task, files with sha256 (paths confined to the export folder).

Schema versions: a reader refuses, in one line, a manifest of a version newer than it reads
(every bertonnx has), and ignores fields it does not know. So a field that changes the answers
raises the version, and only the exports that hold it are written with the new one; every other
export keeps the version older readers load, and this reader loads them all.

    1  the first
    2  `sentence_transformers`: a sentence-transformers folder's modules after the encoder, its
       maximum length, lowercasing and prompts (a reader of 1 would compute other vectors)
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .contract import MANIFEST_NAME, MANIFEST_VERSION, MODEL_NAME
from .tasks import EXPORT_TASKS, TASKS
from .errors import ArtifactError
from .files import read_json_object
from .tokenizer import TOKENIZER_FILES

# Files the runtime reads from an export: the graph and config.json always, the tokenizer's
# when present. Each must be listed (and so hashed): an unlisted one could be edited, or
# dropped in (a tokenizer.json wins over vocab.txt), with nothing to notice.
REQUIRED_FILES = (MODEL_NAME, "config.json")
READ_WHEN_PRESENT = TOKENIZER_FILES


def sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# JSON type of each field a manifest may hold (schema version 1); checked on read.
_FIELD_TYPES = {"task": str, "opset": int, "exporter": str, "inputs": dict, "outputs": dict,
                "optimized": bool, "quantization": dict, "fused_ops": dict, "parity": dict,
                "config": dict, "files": dict, "versions": dict, "source": str, "created": str,
                "defaults": dict, "untrained_head": dict, "sentence_transformers": dict,
                "engines": dict, "embeddings": dict}


@dataclass
class Manifest:
    task: str
    opset: int
    exporter: str                      # e.g. "torch.onnx.export(dynamo=False)"
    inputs: dict                       # name -> {"dtype", "axes"}
    outputs: dict                      # name -> {"dtype", "axes"}
    optimized: bool
    quantization: dict                 # {"mode": "none"|"int8"|"fp16", ...settings}
    fused_ops: dict                    # op type -> count in the final graph
    parity: dict                       # figures from export.parity
    config: dict                       # a copy of config.json's essentials (labels, sizes)
    files: dict = field(default_factory=dict)     # relative path -> sha256
    versions: dict = field(default_factory=dict)  # package -> version
    source: str = ""                   # what MODEL was given to export
    created: str = ""
    # parameter -> this export's own default, over the task record's: what the model's folder
    # chose (Pipeline.folder_defaults: a sentence-transformers folder's pooling and normalize)
    defaults: dict = field(default_factory=dict)
    # a sentence-transformers folder's modules after the encoder (Pooling, Dense, Normalize;
    # none for a SparseEncoder's or a CrossEncoder's), its maximum length, lowercasing and
    # prompts: runtime/core/sentence_modules.py SentenceStack.to_json; {} for any other model
    sentence_transformers: dict = field(default_factory=dict)
    # {} for a head the checkpoint trained for `task`; else which weights were initialised
    # rather than loaded, or came from another task's head (runtime/core/untrained.py)
    untrained_head: dict = field(default_factory=dict)
    # "engine:precision" -> the parity that engine passed (or failed) on this graph at export,
    # beside the CPU provider's in `parity` (export/engines.py): `auto` runs an engine only
    # where its entry passed (runtime/core/engines.py). A reader that ignores it runs the CPU
    # provider, whose answers `parity` vouches for, so it needs no new schema version.
    engines: dict = field(default_factory=dict)
    # a feature-extraction export's vectors (export/calibrate.py): "matryoshka_dimensions", the
    # sizes its model folder declares; "ranges", width -> [[min...], [max...]] per dimension
    # of its default vectors on real text, which int8/uint8 quantization reads
    # (runtime/core/quantize_embeddings.py). A reader that ignores it answers the same floats,
    # so it needs no new schema version.
    embeddings: dict = field(default_factory=dict)
    version: int = MANIFEST_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False) + "\n"

    def hash_files(self, folder: Path) -> None:
        """Record sha256 of every file in `folder` except the manifest itself."""
        self.files = {p.relative_to(folder).as_posix(): sha256(p)
                      for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST_NAME}

    def written_version(self) -> int:
        """The oldest schema version whose readers answer as this export should (see the
        module docstring)."""
        return 2 if self.sentence_transformers else 1

    def write(self, folder: Path) -> Path:
        self.version = self.written_version()
        self.hash_files(folder)
        path = folder / MANIFEST_NAME
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def read(cls, folder: str | Path, *, verify: bool = True) -> "Manifest":
        folder = Path(folder)
        if not folder.is_dir():
            raise ArtifactError(f"export folder {folder} does not exist",
                                "run `bertonnx export MODEL --task TASK --out DIR` first")
        path = folder / MANIFEST_NAME
        if not path.is_file():
            raise ArtifactError(f"{folder} has no {MANIFEST_NAME}: not a bertonnx export "
                                "(or an interrupted one), nor an ONNX folder made elsewhere "
                                "(model.onnx or onnx/model.onnx)",
                                "export it again with `bertonnx export`")
        data = read_json_object(path, "export the model again", what="a manifest object")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise ArtifactError(f"{path} has no schema version", "export the model again")
        if version < 1:
            raise ArtifactError(f"{path} has schema version {version}; versions start at 1",
                                "export the model again")
        if version > MANIFEST_VERSION:
            raise ArtifactError(f"{path} has schema version {version}, newer than this bertonnx "
                                f"understands ({MANIFEST_VERSION})", "upgrade bertonnx")
        known = set(cls.__dataclass_fields__)
        missing = [k for k in ("task", "opset", "inputs", "outputs", "files") if k not in data]
        if missing:
            raise ArtifactError(f"{path} lacks {', '.join(missing)}", "export the model again")
        wrong = [k for k, t in _FIELD_TYPES.items() if k in data and (
            not isinstance(data[k], t) or (t is int and isinstance(data[k], bool)))]
        if wrong:
            raise ArtifactError(f"{path} has fields of the wrong type: {', '.join(wrong)}",
                                "export the model again")
        if not all(isinstance(v, str) for v in data["files"].values()):
            raise ArtifactError(f"{path} lists files without a sha256 string",
                                "export the model again")
        unlisted = [n for n in REQUIRED_FILES if n not in data["files"]]
        unlisted += [n for n in READ_WHEN_PRESENT
                     if n not in data["files"] and (folder / n).exists()]
        if unlisted:
            # nothing would vouch for them: a damaged or edited one would load unchecked
            raise ArtifactError(f"{path} does not list {', '.join(unlisted)}, which the "
                                "runtime reads", "export the model again")
        if data["task"] not in EXPORT_TASKS:
            raise ArtifactError(f"{path} names unknown task {data['task']!r}",
                                "export the model again")
        stray = sorted(set(data.get("defaults", {})) - set(TASKS[data["task"]].parameters))
        if stray:  # their values are checked by the pipeline's rules when it loads
            raise ArtifactError(f"{path} sets defaults for {', '.join(stray)}, which "
                                f"{data['task']} does not take", "export the model again")
        defaults = dict(exporter="", optimized=False, quantization={"mode": "none"},
                        fused_ops={}, parity={}, config={})
        m = cls(**{**defaults, **{k: v for k, v in data.items() if k in known}})
        m.check_paths(folder)
        if verify:
            m.verify(folder)
        return m

    def check_paths(self, folder: Path) -> None:
        root = folder.resolve()
        for rel in self.files:
            p = (folder / rel).resolve()
            if Path(rel).is_absolute() or root not in p.parents:
                raise ArtifactError(f"manifest path {rel!r} escapes the export folder",
                                    "the manifest was tampered with; export again")

    def verify(self, folder: Path) -> None:
        """Every recorded file present with its sha256; names the damaged file."""
        for rel, digest in self.files.items():
            p = folder / rel
            if not p.is_file():
                raise ArtifactError(f"{p} is missing from the export",
                                    "copy the whole export folder, or export again")
            if sha256(p) != digest:
                raise ArtifactError(f"{p} is damaged (sha256 differs from the manifest)",
                                    "copy it again from the source, or export again")
