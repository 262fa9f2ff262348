"""What the Python-backend model does inside Triton's stub, free of Triton's own types.

`model.py` (the generic file `export-triton --backend python` copies into every version folder)
hands each execution's requests here as plain values — input name -> texts, the request's
parameters as Triton gives them (a JSON object) — and gets one outcome per request back: the
output arrays, or the one-line error that request earns. Everything task-specific comes from the
pipeline's own `tensors` declaration (runtime/core/tensors.py), the one bertonnx's /v2 route
reads, so both speak the same tensors and answer the same numbers.

Triton's dynamic batcher hands over several requests at once (`nv_inference_exec_count` counts
these executions). Requests asking for the same parameters become one pipeline call, which pads
each micro-batch to its own longest sequence; a bad input fails only the request that sent it
(`InputError.index` names the input) and the others are answered from one call again.
Reference: triton-inference-server/python_backend README ("execute", "Error Handling",
"Inference Request Parameters").
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import BertOnnxError, InputError
from ..core.tasks import TASKS
from ..core.tensors import TaskTensors

EXPORT = "export"   # the export folder's name in the version folder (a copy or a link)
# Triton request parameters that belong to the protocol, not to the pipeline
RESERVED = frozenset({"binary_data_output", "priority", "timeout", "sequence_id",
                      "sequence_start", "sequence_end"})


@dataclass
class Request:
    """One Triton request as plain values: each input's elements (a numpy array of bytes, as
    the backend hands BYTES over) and its parameters (a JSON object)."""

    tensors: dict[str, np.ndarray]
    parameters: dict[str, Any]


def options_of(args: dict) -> tuple[Path, int | None, str | None]:
    """(version folder, onnxruntime threads, providers) from the `args` Triton's Python backend
    passes to `initialize`: the config's parameters (a GPU instance group's say "cuda,cpu")."""
    config = json.loads(args["model_config"])
    params = {k: v.get("string_value") for k, v in (config.get("parameters") or {}).items()}
    threads = int(params["threads"]) if params.get("threads") else None
    providers = params.get("providers") or None
    version = Path(args["model_repository"]) / args["model_version"]
    return version, threads, providers


def texts_of(name: str, array: np.ndarray) -> list[str]:
    """A BYTES tensor's elements as text (InputError for bytes that are not UTF-8)."""
    out = []
    for i, value in enumerate(array.reshape(-1)):
        if isinstance(value, str):
            out.append(value)
            continue
        try:
            out.append(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"input {name!r}: element {i} is not UTF-8 text",
                             "send text encoded as UTF-8") from None
    return out


@dataclass
class _Ready:
    position: int            # the request's place in the execution
    inputs: list             # the pipeline's inputs, one per row
    params: dict             # checked keyword arguments of the call


def read_parameters(spec: TaskTensors, raw: dict, pipe) -> dict:
    """A request's parameters as the pipeline's keyword arguments, checked by the task record.

    Triton's request parameters are scalars (bool, int, string), so a parameter that takes a
    list of strings travels as its command-line spelling (`targets`: "a,b"; `ignore_labels`:
    "O,MISC"), read by the task record's own flag parser."""
    params = {k: v for k, v in raw.items() if k not in RESERVED}
    unknown = sorted(set(params) - set(spec.parameters))
    if unknown:
        raise InputError(f"unknown parameters {unknown} for {spec.task}",
                         f"allowed: {', '.join(sorted(spec.parameters)) or 'none'}")
    record = TASKS[spec.task].parameters
    for name, value in list(params.items()):
        param = record[name]
        if (param.rule.kind == "strings" and isinstance(value, str)
                and param.flag is not None and param.flag.parse is not None):
            params[name] = param.flag.parse(value)
    for name, narrow in spec.parameters.items():
        if narrow is not None and name in params:
            narrow.check(name, params[name], pipe)
    pipe.check_parameters(**params)
    return params


class PipelineModel:
    """One model instance: the pipeline of the export in VERSION/export, answering requests."""

    def __init__(self, version_dir: str | Path, threads: int | None = None, providers=None):
        from ..core.pipelines import load  # onnxruntime, once the stub starts the model

        self.pipe = load(Path(version_dir) / EXPORT, threads=threads, providers=providers)
        self.spec: TaskTensors = self.pipe.tensors

    def run(self, requests: list[Request]) -> list[dict[str, np.ndarray] | BertOnnxError]:
        """One outcome per request, in order: its output arrays, or its error."""
        outcomes: list = [None] * len(requests)
        groups: dict[str, list[_Ready]] = {}
        for i, r in enumerate(requests):
            try:
                ready = self._read(i, r)
            except BertOnnxError as e:
                outcomes[i] = e
                continue
            key = json.dumps(ready.params, sort_keys=True, default=str)
            groups.setdefault(key, []).append(ready)
        for group in groups.values():
            self._answer(group, outcomes)
        return outcomes

    def _read(self, position: int, request: Request) -> _Ready:
        spec = self.spec
        texts = {name: texts_of(name, a) for name, a in request.tensors.items()}
        missing = [t.name for t in spec.inputs if not t.optional and t.name not in texts]
        if missing:
            raise InputError(f"{spec.task} needs the input(s) {', '.join(missing)}",
                             "send BYTES tensors, one element per text")
        lengths = {name: len(v) for name, v in texts.items()}
        if len(set(lengths.values())) > 1:
            raise InputError(f"the inputs hold different numbers of elements {lengths}",
                             "give one element of each per row")
        params = read_parameters(spec, request.parameters, self.pipe)
        inputs = spec.read(texts, self.pipe)
        self.pipe.read_inputs(inputs)  # a bad text is this request's error, before merging
        return _Ready(position, inputs, params)

    def _answer(self, group: list[_Ready], outcomes: list) -> None:
        """Answer a group that shares parameters from one call; a request whose input fails is
        answered with its error and the call made again without it."""
        while group:
            merged = [x for r in group for x in r.inputs]
            try:
                results = self.pipe(merged, **group[0].params)
            except InputError as e:
                culprit = _owner(group, e.index)
                if culprit is None:  # not one input's fault: each request alone
                    for r in group:
                        self._answer_alone(r, outcomes)
                    return
                outcomes[culprit.position] = e
                group = [r for r in group if r is not culprit]
                continue
            start = 0
            for r in group:
                part = results[start:start + len(r.inputs)]
                start += len(r.inputs)
                try:
                    outcomes[r.position] = self.spec.write(part)
                except BertOnnxError as e:  # e.g. a text whose one mask became two tokens
                    outcomes[r.position] = e
            return

    def _answer_alone(self, r: _Ready, outcomes: list) -> None:
        try:
            outcomes[r.position] = self.spec.write(self.pipe(r.inputs, **r.params))
        except BertOnnxError as e:
            outcomes[r.position] = e


def _owner(group: list[_Ready], index: int | None) -> _Ready | None:
    """The request whose input is `index` of the merged call."""
    if index is None:
        return None
    for r in group:
        if index < len(r.inputs):
            return r
        index -= len(r.inputs)
    return None
