"""`bertonnx export-triton`: an export folder -> a Triton Inference Server model repository.

Two kinds of model (`TritonOptions.backend`, BACKENDS):

- "python" (the default): the pipeline model, raw text in and the task's answers out, running
  bertonnx's runtime in Triton's Python backend — pipeline_repository.py. It runs on any Triton
  with the Python backend, the one `bertonnx serve --engine triton` starts included.
- "onnxruntime": the graph alone for Triton's onnxruntime backend (below); the client tokenizes,
  pads and post-processes. For Triton images that have that backend and clients that want tensors.

The graph model is REPO/NAME/config.pbtxt and REPO/NAME/1/model.onnx (plus external-data files,
if the export has them), with dynamic batching on. Names, types and
dims come from the graph itself, checked against the export contract: with
`max_batch_size > 0` Triton's dims leave out the batch axis, so every `sequence` axis is -1 and
every fixed axis (vocabulary, labels, hidden size) is its number.

Reference: triton-inference-server/common protobuf/model_config.proto (ModelConfig,
ModelInput, ModelOutput, ModelDynamicBatching, ModelInstanceGroup) and the server's
docs/user_guide/model_configuration.md. The text written here is protobuf text format; the
tests parse it with tritonclient's compiled model_config_pb2.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..core.atomic import publishing
from ..core.contract import INPUT_AXES, INPUT_NAMES, MODEL_NAME
from ..core.tasks import TASKS
from ..core.errors import ArtifactError, InputError
from ..core.foreign import read_foreign
from ..core.manifest import Manifest
from .options import BACKENDS, KINDS, TritonOptions
from .pipeline_repository import write_pipeline_model

# onnxruntime's type strings -> Triton's DataType enum names (model_config.proto).
TRITON_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(float16)": "TYPE_FP16",
    "tensor(bfloat16)": "TYPE_BF16",
    "tensor(double)": "TYPE_FP64",
    "tensor(int64)": "TYPE_INT64",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int8)": "TYPE_INT8",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(bool)": "TYPE_BOOL",
}
# Triton model names become URL path segments and folder names.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str                   # Triton enum name, e.g. TYPE_INT64
    dims: tuple[int, ...]            # without the batch axis; -1 = dynamic


def _config_size(config: dict, key: str) -> int | None:
    if key == "num_labels" and config.get("id2label"):
        return len(config["id2label"])
    v = config.get(key)
    return v if isinstance(v, int) and v > 0 else None


def graph_tensors(export_dir: Path, task: str, config: dict | None = None
                  ) -> tuple[list[Tensor], list[Tensor]]:
    """Inputs and outputs as Triton sees them, read from the graph and checked on the contract.

    `config` is the model config (the manifest's copy of config.json) for axes the graph
    leaves symbolic."""
    from ..core.session import create_session  # onnxruntime only when the command runs

    session = create_session(export_dir / MODEL_NAME, optimization="disable").inner
    contract_axes = {n: dict(INPUT_AXES) for n in INPUT_NAMES}
    contract = TASKS[task]
    contract_axes.update({n: dict(ax) for n, ax in contract.outputs})

    def convert(args, expected: tuple[str, ...], what: str) -> list[Tensor]:
        names = tuple(a.name for a in args)
        unknown = [n for n in names if n not in expected]
        if unknown:
            raise ArtifactError(f"the graph's {what} {unknown} are not in the export contract "
                                f"for {task} ({', '.join(expected)})", "export the model again")
        out = []
        for a in args:
            if a.type not in TRITON_TYPES:
                raise ArtifactError(f"{what[:-1]} {a.name} has type {a.type}, which Triton's "
                                    "onnxruntime backend cannot take", "export the model again")
            axes = contract_axes[a.name]
            if len(a.shape) < 1 + max(axes):
                raise ArtifactError(f"{a.name} has rank {len(a.shape)}, the contract wants "
                                    f"axes {dict(axes)}", "export the model again")
            # the output's one fixed axis: the graph may leave it symbolic (a Reshape names it),
            # so when the graph does not say, the model's config does; both saying must agree
            fixed_axis, key = contract.fixed_axis or (None, None)
            from_config = _config_size(config or {}, key) if key and what == "outputs" else None
            dims = []
            for i, d in enumerate(a.shape[1:], start=1):
                graph_size = d if isinstance(d, int) and d > 0 else None
                if i in axes:
                    dims.append(-1)
                elif i == fixed_axis and what == "outputs" and from_config is not None:
                    if graph_size is not None and graph_size != from_config:
                        raise ArtifactError(f"{a.name} axis {i} is {graph_size} in the graph but "
                                            f"{key} = {from_config} in the config",
                                            "export the model again")
                    dims.append(from_config)
                elif graph_size is not None:
                    dims.append(graph_size)
                else:
                    raise ArtifactError(f"{a.name} axis {i} is {d!r}: neither a contract "
                                        "dynamic axis nor a fixed size", "export the model again")
            out.append(Tensor(a.name, TRITON_TYPES[a.type], tuple(dims)))
        return out

    inputs = convert(session.get_inputs(), INPUT_NAMES, "inputs")
    if not any(t.name == "input_ids" for t in inputs):
        raise ArtifactError("the graph has no input_ids input", "export the model again")
    outputs = convert(session.get_outputs(), contract.output_names, "outputs")
    return inputs, outputs


def _tensor_block(field: str, tensors: list[Tensor]) -> str:
    items = []
    for t in tensors:
        dims = ", ".join(str(d) for d in t.dims)
        items.append(f'  {{\n    name: "{t.name}"\n    data_type: {t.data_type}\n'
                     f'    dims: [ {dims} ]\n  }}')
    return f"{field} [\n" + ",\n".join(items) + "\n]\n"


def config_pbtxt(name: str, inputs: list[Tensor], outputs: list[Tensor],
                 opts: TritonOptions) -> str:
    """The model's config.pbtxt (protobuf text format of inference.ModelConfig)."""
    return (
        f'name: "{name}"\n'
        'backend: "onnxruntime"\n'
        f"max_batch_size: {opts.max_batch_size}\n"
        + _tensor_block("input", inputs)
        + _tensor_block("output", outputs)
        + opts.scheduling()
    )


def _model_files(export_dir: Path, manifest: Manifest) -> list[str]:
    """model.onnx and its external-data files (exports past 2 GB keep weights beside it)."""
    files = [MODEL_NAME]
    for rel in manifest.files:
        p = Path(rel)
        if rel != MODEL_NAME and (p.name.startswith(MODEL_NAME) or p.suffix == ".data"):
            files.append(rel)
    return files


def write_repository(export_dir: str | Path, repository: str | Path,
                  opts: TritonOptions = TritonOptions()) -> Path:
    """Write REPO/NAME (config.pbtxt and version 1) for `opts.backend`; returns REPO/NAME."""
    export_dir = Path(export_dir)
    if (foreign := read_foreign(export_dir)) is not None:
        # a deployment artifact gets a verified graph: the file hashes and parity come first
        raise ArtifactError(f"{export_dir} was made elsewhere ({foreign.layout} layout) and "
                            "has no manifest", f"bertonnx adopt {export_dir} --out DIR "
                            "--reference MODEL, then export-triton DIR")
    manifest = Manifest.read(export_dir, verify=True)
    name = opts.name or export_dir.resolve().name
    if not _NAME.match(name):
        raise InputError(f"model name {name!r} is not a valid Triton model name",
                         "use letters, digits, '.', '_' or '-' (pass --name)")
    if opts.max_batch_size < 1:
        raise InputError(f"max batch size must be ≥ 1, got {opts.max_batch_size}",
                         "Triton's dynamic batching needs --max-batch-size 1 or more")
    if opts.instances < 1:
        raise InputError(f"instances must be ≥ 1, got {opts.instances}", "pass --instances 1+")
    if opts.kind not in KINDS:
        raise InputError(f"unknown instance kind {opts.kind!r}", "use --kind cpu or --kind gpu")
    if opts.max_wait_ms < 0:
        raise InputError(f"max wait must be ≥ 0 ms, got {opts.max_wait_ms}", "pass 0 or more")
    if opts.backend not in BACKENDS:
        raise InputError(f"unknown Triton backend {opts.backend!r}",
                         f"use --backend {' or --backend '.join(BACKENDS)}")
    if opts.threads is not None and opts.threads < 0:
        raise InputError(f"threads must be ≥ 0, got {opts.threads}", "pass 0 or more")

    if opts.backend == "onnxruntime":
        inputs, outputs = graph_tensors(export_dir, manifest.task, manifest.config)
    repo = Path(repository)
    target = repo / name
    if target.exists() and not opts.force:
        raise InputError(f"{target} already exists", "pass --force to replace it")
    repo.mkdir(parents=True, exist_ok=True)

    # Build beside the target and rename into place: Triton polling the repository never
    # sees a half-written model, and an interrupted run leaves only a dot-folder behind.
    with publishing(target) as tmp:
        if opts.backend == "python":
            write_pipeline_model(tmp, export_dir, manifest, name, opts)
        else:
            version = tmp / "1"
            for rel in _model_files(export_dir, manifest):
                dst = version / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(export_dir / rel, dst)
            (tmp / "config.pbtxt").write_text(config_pbtxt(name, inputs, outputs, opts),
                                              encoding="utf-8")
        tmp.chmod(0o755)  # whatever the umask: Triton may run as another user
    return target
