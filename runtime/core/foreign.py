"""ONNX folders made by other tools, served as they are — with no manifest, so no parity report.

    Optimum (`optimum-cli export onnx`, ORTModel.save_pretrained):
        DIR/model.onnx (or model_optimized.onnx, model_quantized.onnx), config.json, tokenizer
    transformers.js (the ONNX folders of Xenova/* and onnx-community/* on the hub):
        DIR/onnx/model.onnx (or onnx/model_quantized.onnx), config.json, tokenizer

Both name the graph's inputs and outputs as bertonnx does (input_ids, attention_mask and,
where the family has them, token_type_ids; logits, start_logits/end_logits,
last_hidden_state), so the pipelines run them unchanged. The task comes from config.json's
`architectures` unless the caller names it; the graph's inputs are checked here and its
outputs by the pipeline when the session opens. `bertonnx adopt` turns such a folder into a
verified export (manifest, fusion where the graph allows, parity against a reference).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .contract import INPUT_DTYPE, INPUT_NAMES, MANIFEST_NAME, task_of_architectures
from .errors import ArtifactError, ConfigError
from .files import read_json_object
from .manifest import Manifest
from .once import first_time
from .schema import CONFIG_RULES, check_values

log = logging.getLogger("bertonnx")


@dataclass(frozen=True)
class Layout:
    name: str
    models: tuple[str, ...]  # the graph files it may hold, the one served first


LAYOUTS = (
    Layout("Optimum", ("model.onnx", "model_optimized.onnx", "model_quantized.onnx")),
    Layout("transformers.js", ("onnx/model.onnx", "onnx/model_quantized.onnx")),
)


@dataclass(frozen=True)
class ForeignFolder:
    path: Path
    layout: str
    model_file: str  # relative to path
    task: str
    config: dict

    @property
    def manifest(self) -> Manifest:
        """What a manifest would say, as far as the folder tells: no hashes, no parity."""
        return Manifest(task=self.task, opset=0, exporter=f"made elsewhere ({self.layout})",
                        inputs={}, outputs={}, optimized=False, quantization={"mode": "unknown"},
                        fused_ops={}, parity={}, config={}, source=str(self.path))


def layout_of(path: Path) -> tuple[Layout, str] | None:
    """The layout and graph file of a folder without a manifest, or None if it has neither."""
    if (path / MANIFEST_NAME).exists():
        return None
    for layout in LAYOUTS:
        for rel in layout.models:
            if (path / rel).is_file():
                return layout, rel
    return None


def read_foreign(path: Path, task: str | None = None) -> ForeignFolder | None:
    """`path` read as a folder made elsewhere (None when it is not one); `task` (canonical
    name) wins over config.json's `architectures`."""
    found = layout_of(path)
    if found is None:
        return None
    layout, rel = found
    config_path = path / "config.json"
    if not config_path.is_file():
        raise ArtifactError(f"{path} holds {rel} ({layout.name} layout) but no config.json",
                            "copy the model's config.json next to it")
    config = check_values(read_json_object(config_path, "restore the file"), CONFIG_RULES,
                          config_path)
    if task is None:
        arches = config.get("architectures") or []
        task = task_of_architectures(arches)
        if task is None:
            said = f"says {', '.join(map(str, arches))}" if arches else "names no architectures"
            raise ConfigError(f"cannot tell the task of {path}: its config.json {said}",
                              "pass the task (load(DIR, task=...), or the task's command)")
    return ForeignFolder(path, layout.name, rel, task, config)


def check_inputs(folder: ForeignFolder, inputs) -> None:
    """The graph must take input_ids and nothing the runtime does not make, all int64
    (`inputs`: onnxruntime's NodeArg list)."""
    names = [i.name for i in inputs]
    unknown = [n for n in names if n not in INPUT_NAMES]
    if "input_ids" not in names or unknown:
        raise ArtifactError(
            f"{folder.path / folder.model_file} takes inputs {names}; bertonnx feeds "
            f"{', '.join(INPUT_NAMES)}", "export the model with those input names")
    wrong = [i.name for i in inputs if i.type != f"tensor({INPUT_DTYPE})"]
    if wrong:
        raise ArtifactError(f"{folder.path / folder.model_file} wants {wrong} as "
                            f"{[i.type for i in inputs if i.name in wrong]}, not {INPUT_DTYPE}",
                            "export the model with int64 inputs")


def warn_unverified(folder: ForeignFolder) -> None:
    """Say once per folder and process that no parity report vouches for the graph."""
    if first_time("unverified", folder.path.resolve()):
        log.warning("%s was made elsewhere (%s layout, %s): no parity report vouches for it; "
                    "`bertonnx adopt %s --out DIR --reference MODEL` makes a verified export",
                    folder.path, folder.layout, folder.model_file, folder.path)


def read_manifest(path: str | Path, *, verify: bool = True) -> Manifest:
    """The export's manifest, or for a folder made elsewhere what its files tell (a cheap read
    for commands that need the task before they load the pipeline)."""
    foreign = read_foreign(Path(path))
    return foreign.manifest if foreign is not None else Manifest.read(path, verify=verify)
