"""The pipeline model for Triton's Python backend: raw text in, the task's answers out.

`bertonnx export-triton --backend python` (the default) writes

    REPO/NAME/config.pbtxt        backend "python", the task's tensors, dynamic batching,
                                  instance_group, parameters (threads, providers)
    REPO/NAME/1/model.py          runtime/triton/model.py, unchanged: the same file for every model
    REPO/NAME/1/export/           the export folder: a copy (the repository is whole on its own:
                                  it can be moved to another host or baked into an image), or
                                  with `link=True` a symlink to it (`serve --engine triton`'s
                                  scratch repository lives only as long as the server, beside
                                  the export it serves, and need not copy a 400 MB model)

The tensors are the pipeline's own `tensors` declaration, the one bertonnx's /v2 route speaks:
same names, BYTES/FP32/INT64, same shapes, with one rule of Triton's: a batching model's tensor
has at least one dimension after the batch axis, so a tensor bertonnx shapes [N] is [N, 1] on
Triton's inference API (`dims: [1]` with `reshape: { shape: [] }`, so the model itself still
sees [N]). [N, k] stays [N, k]; an embedding is [N, hidden size] with the number written in.
Reference: Triton's docs/user_guide/model_configuration.md (Reshape, optional inputs) and
python_backend's README.
"""
from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from ..core.contract import MANIFEST_NAME
from ..core.manifest import Manifest
from ..core.tasks import pipeline_class
from ..core.tensors import HIDDEN, TaskTensors, Tensor, hidden_size
from .stub import EXPORT

TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32", "INT64": "TYPE_INT64"}


def task_tensors(task: str) -> TaskTensors:
    return pipeline_class(task).tensors


def triton_dims(t: Tensor, hidden: int | None) -> tuple[tuple[int, ...], bool]:
    """(dims on Triton's inference API, without the batch axis; whether the model sees them
    reshaped to no dims at all)."""
    dims = tuple(hidden if d == HIDDEN else d for d in t.shape[1:])
    return (dims, False) if dims else ((1,), True)


def _block(field: str, tensors: tuple[Tensor, ...], hidden: int | None) -> str:
    items = []
    for t in tensors:
        dims, reshape = triton_dims(t, hidden)
        lines = [f'    name: "{t.name}"', f"    data_type: {TYPES[t.datatype]}",
                 f"    dims: [ {', '.join(map(str, dims))} ]"]
        if reshape:
            lines.append("    reshape: { shape: [ ] }")
        if t.optional:
            lines.append("    optional: true")
        items.append("  {\n" + "\n".join(lines) + "\n  }")
    return f"{field} [\n" + ",\n".join(items) + "\n]\n"


def pipeline_config(name: str, spec: TaskTensors, hidden: int | None, opts) -> str:
    """config.pbtxt of the Python-backend model (protobuf text of inference.ModelConfig)."""
    params = {"threads": opts.threads, "providers": "cuda,cpu" if opts.kind == "gpu" else None}
    parameters = "".join(
        f'parameters {{\n  key: "{k}"\n  value: {{ string_value: "{v}" }}\n}}\n'
        for k, v in params.items() if v is not None)
    return (
        f'name: "{name}"\n'
        'backend: "python"\n'
        f"max_batch_size: {opts.max_batch_size}\n"
        + _block("input", spec.inputs, hidden)
        + _block("output", spec.outputs, hidden)
        + opts.scheduling()
        + parameters
    )


def model_file() -> str:
    """The generic model.py, as shipped in the package."""
    return resources.files("bertonnx.runtime.triton").joinpath("model.py").read_text("utf-8")


def write_pipeline_model(tmp: Path, export_dir: Path, manifest: Manifest, name: str,
                         opts) -> None:
    """Fill the scratch folder `tmp` (REPO/NAME to be) with the Python-backend model."""
    spec = task_tensors(manifest.task)
    hidden = None
    if any(HIDDEN in t.shape for t in spec.outputs):
        # onnxruntime only for a model whose shapes need it: the width /v2 metadata reports
        from ..core.pipelines import load

        hidden = hidden_size(load(export_dir))
    version = tmp / "1"
    version.mkdir()
    (version / "model.py").write_text(model_file(), encoding="utf-8")
    if opts.link:
        os.symlink(export_dir.resolve(), version / EXPORT, target_is_directory=True)
    else:
        for rel in [*manifest.files, MANIFEST_NAME]:
            dst = version / EXPORT / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(export_dir / rel, dst)
    (tmp / "config.pbtxt").write_text(pipeline_config(name, spec, hidden, opts),
                                      encoding="utf-8")
