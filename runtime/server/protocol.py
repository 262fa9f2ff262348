"""The request protocol: Hugging Face's inference-API convention in, the pipeline's own
output JSON out, and the errors a client gets (status, one line, a type)."""
from __future__ import annotations

import inspect
import json
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

import numpy as np

from ..contract import pipeline_class

# Parameters a request may not set: the server decides batching, the inputs live in "inputs".
_RESERVED = {"self", "inputs", "args", "kwargs", "question", "context", "batch_size",
             "return_tensors"}  # numpy arrays mean nothing in JSON


# -- errors ----------------------------------------------------------------------------------


class ClientError(Exception):
    """A request the server refuses: HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, kind: str = "InputError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": message, "type": kind}).encode()


# -- requests --------------------------------------------------------------------------------


def _rules(task: str):
    """The task's pipeline class, from the task table: a request's shape is judged by it
    before the model is loaded (importing it loads onnxruntime, so only once a request comes)."""
    return pipeline_class(task)


def _shape_hint(task: str) -> str:
    return "send " + _rules(task).input_hint


@dataclass(frozen=True)
class Parsed:
    inputs: Any          # one input, or a list of them
    single: bool         # inputs is one input (not a list)
    params: dict

    @property
    def size(self) -> int:
        return 1 if self.single else len(self.inputs)


def parse_request(task: str, body: bytes, allowed: frozenset[str] | None) -> Parsed:
    """Validate a /predict body; ClientError(400) names what is wrong and how to fix it."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ClientError(400, f"body is not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise ClientError(400, 'body must be a JSON object {"inputs": ..., "parameters": {...}}')
    extra = set(data) - {"inputs", "parameters"}
    if extra:
        raise ClientError(400, f"unknown body fields {sorted(extra)}; "
                               'only "inputs" and "parameters" are read')
    if "inputs" not in data:
        raise ClientError(400, 'body lacks "inputs"; ' + _shape_hint(task))
    inputs, params = data["inputs"], data.get("parameters") or {}
    if not isinstance(params, dict):
        raise ClientError(400, '"parameters" must be a JSON object of pipeline arguments')
    if allowed is not None:
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ClientError(400, f"unknown parameters {unknown} for {task}; "
                                   f"allowed: {', '.join(sorted(allowed)) or 'none'}")
    rules = _rules(task)
    if isinstance(inputs, list):
        if not inputs:
            raise ClientError(400, '"inputs" is an empty list; ' + _shape_hint(task))
        bad = [i for i, x in enumerate(inputs) if not rules.is_json_input(x, in_list=True)]
        if bad:
            raise ClientError(400, f'"inputs" item {bad[0]} has the wrong shape for {task}; '
                                   + _shape_hint(task))
        return Parsed(inputs, False, params)
    if not rules.is_json_input(inputs):
        raise ClientError(400, f'"inputs" has the wrong shape for {task}; ' + _shape_hint(task))
    return Parsed(inputs, True, params)


def allowed_parameters(pipeline) -> frozenset[str] | None:
    """Keyword arguments the pipeline's __call__ names (None: it takes **kwargs, let it judge)."""
    try:
        sig = inspect.signature(pipeline.__call__)
    except (TypeError, ValueError):
        return None
    names = set()
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            return None
        if p.kind is p.VAR_POSITIONAL or (i == 0 and p.kind is p.POSITIONAL_ONLY):
            continue
        names.add(p.name)
    first = next(iter(sig.parameters), None)
    return frozenset(names - _RESERVED - {first})


# -- one pipeline call for many requests -----------------------------------------------------


class PipelineRunner:
    """Runs a group of requests (same parameters) as ONE pipeline call and splits the answer.

    Each request's answer must equal `pipeline(request.inputs, **params)`: each request is
    read by the pipeline's own rules (`read_inputs`), the reads go in as one list, the
    results are cut back per request and shaped by the pipeline's `unwrap` (transformers'
    quirks included). A group of one request is passed through untouched.
    """

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.task = pipeline.task

    def __call__(self, requests: list[Parsed], params: dict) -> list:
        pipe = self.pipeline
        if len(requests) == 1:
            return [pipe(requests[0].inputs, **params)]
        # imported with the model, not the server package (pipelines bring onnxruntime)
        from ..pipelines.inputs import Inputs

        # an InputError here fails the group; the batcher then runs each request alone
        reads = [pipe.read_inputs(r.inputs) for r in requests]
        out = pipe(Inputs.concat(reads), **params)
        if not isinstance(out, list) or len(out) != sum(map(len, reads)):
            raise RuntimeError(f"pipeline returned {type(out).__name__} of "
                               f"{len(out) if isinstance(out, list) else '?'} for "
                               f"{sum(map(len, reads))} inputs")
        return [pipe.unwrap(part, read, **params)
                for part, read in zip(Inputs.split(out, reads), reads)]


def jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
