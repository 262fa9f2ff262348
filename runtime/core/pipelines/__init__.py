"""Task pipelines on an export folder, and `load(DIR)` which picks one by the manifest's task.

    from bertonnx.runtime import load
    fill = load("out/minilm-mlm")            # reads + verifies bertonnx.json, one ORT session
    fill("Paris is the [MASK] of France.")   # → transformers-shaped result dicts

Torch-free: imports numpy, onnxruntime and tokenizers only.
"""
from __future__ import annotations

from pathlib import Path

from .. import engines
from ..cpu import warn_if_other_cpu
from ..defaults import resolve_export
from ..errors import ArtifactError, ConfigError, TaskMismatchError
from ..foreign import check_inputs, warn_unverified
from ..session import create_session
from ..tasks import TASK_ALIASES, TASKS, pipeline_class
from ..untrained import warn_untrained_head
from .base import DEFAULT_BATCH_SIZE, Pipeline
from .windows import Windows
from .folder import ExportFolder
from .inputs import Inputs, QAInput, TextPair

# task -> pipeline class, as each task's record (runtime/core/tasks.py) names it
PIPELINES: dict[str, type[Pipeline]] = {task: pipeline_class(task) for task in TASKS}
# the classes by name (FillMaskPipeline, ...), importable from here
_CLASSES = {cls.__name__: cls for cls in PIPELINES.values()}

__all__ = ["load", "PIPELINES", "Pipeline", "ExportFolder", "Inputs", "TextPair", "QAInput",
           "Windows", *_CLASSES]


def __getattr__(name: str):
    try:
        return _CLASSES[name]
    except KeyError:
        raise AttributeError(name) from None


def load(path: str | Path, *, task: str | None = None, providers=None,
         threads: int | None = None, optimization: str = "all",
         batch_size: int = DEFAULT_BATCH_SIZE, streams: int | str = 1,
         bulk: bool = False) -> Pipeline:
    """The pipeline for the export at `path` (or `"default"`: the shipped export of `task`,
    bertonnx.runtime.core.defaults): manifest read and sha256-verified, one session. A folder made
    by Optimum or for transformers.js (runtime/core/foreign.py) is served as it is, with a warning
    that no parity report vouches for it; its task is config.json's `architectures` or `task`.

    `task`, when given, must be the manifest's (TaskMismatchError otherwise); `providers` is
    the engine: "auto" (default: the fastest this CPU has that the export proved at export),
    "cpu", "openvino", "openvino:bf16", "openvino:f32", "cuda", "tensorrt", or onnxruntime
    provider names (a list or comma-separated) — runtime/core/engines.py. `streams`: the
    session's calls at once, its threads split between them (a call's micro-batches run side by
    side): 1, every thread on each call, is the latency default; "auto" is the engine's choice
    for throughput work (OpenVINO: 2), which bulk jobs take (docs/engines.md, "Streams").
    `bulk`: the load is for throughput work (`bertonnx run`, Ray Data), where `auto` may pick
    another engine than for latency work (engines.BULK_AUTO: an int8 export's static int8 graph
    on Zen 4).
    """
    if task is not None:
        task = TASK_ALIASES.get(task, task)
        if task not in PIPELINES:
            raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(PIPELINES)}")
    path = resolve_export(path, task)
    folder = ExportFolder.read(path, task=task)
    manifest = folder.manifest
    if task is not None and task != manifest.task:
        raise TaskMismatchError(f"{path} was exported for {manifest.task}, not {task}",
                                f"export the model with --task {task}, or use the "
                                f"`bertonnx {TASKS[manifest.task].command}` command")
    # the engine: as asked, or `auto`'s pick for this CPU among those the export proved (for
    # throughput work it may differ: engines.BULK_AUTO)
    choice = engines.choose(providers, quantization=manifest.quantization.get("mode", "none"),
                            engines=manifest.engines, where=str(path), bulk=bulk)
    engines.warn_if_failed(choice, manifest.engines, str(path))  # asked for by name
    # the graph that engine reads: model.onnx, or the file the manifest names for it
    graph = engines.graph_file(choice, manifest.engines)
    if graph is not None and graph not in manifest.files:  # only a file the manifest verified
        raise ArtifactError(f"{path}'s manifest names {graph} for {choice.key} without its "
                            "sha256", "export the model again")
    session = create_session(folder.path / graph if graph else folder.model_path,
                             providers=choice, threads=threads, optimization=optimization,
                             streams=streams)
    if folder.foreign is not None:
        check_inputs(folder.foreign, session.inner.get_inputs())
        warn_unverified(folder.foreign)
    # an int8 graph made for another CPU kind; the advice names the checkpoint it came from
    warn_if_other_cpu(path, manifest.quantization, source=manifest.source, task=manifest.task)
    warn_untrained_head(path, manifest.untrained_head, manifest.task)  # --allow-untrained-head
    return PIPELINES[manifest.task](folder, session, batch_size=batch_size)
