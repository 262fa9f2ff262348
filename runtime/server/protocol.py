"""The request protocol: Hugging Face's inference-API convention in, the pipeline's own
output JSON out, and the errors a client gets (status, one line, a type)."""
from __future__ import annotations

import inspect
import json
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

import numpy as np

# Parameters a request may not set: the server decides batching, the inputs live in "inputs".
_RESERVED = {"self", "inputs", "args", "kwargs", "question", "context", "batch_size",
             "return_tensors"}  # numpy arrays mean nothing in JSON
# Tasks whose pipeline takes text pairs as {"text", "text_pair"} objects.
_PAIR_TASKS = {"text-classification"}


# -- errors ----------------------------------------------------------------------------------


class ClientError(Exception):
    """A request the server refuses: HTTP status and one line for the client."""

    def __init__(self, status: int, message: str, kind: str = "InputError"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": message, "type": kind}).encode()


# -- requests --------------------------------------------------------------------------------


def _is_text_input(task: str, x: Any) -> bool:
    if isinstance(x, str):
        return task != "question-answering"
    if not isinstance(x, dict):
        return False
    if task == "question-answering":
        return set(x) == {"question", "context"} and all(isinstance(v, str) for v in x.values())
    if task in _PAIR_TASKS:
        return ("text" in x and set(x) <= {"text", "text_pair"}
                and all(isinstance(v, str) for v in x.values()))
    return False


def _is_list_item(task: str, x: Any) -> bool:
    # A [text, text_pair] list is a pair inside a list of inputs, as the pipeline reads it.
    if task in _PAIR_TASKS and isinstance(x, list):
        return len(x) == 2 and all(isinstance(v, str) for v in x)
    return _is_text_input(task, x)


def _shape_hint(task: str) -> str:
    if task == "question-answering":
        return 'send {"question": "...", "context": "..."} or a list of such objects'
    if task in _PAIR_TASKS:
        return 'send a text, {"text": "...", "text_pair": "..."}, or a list of those'
    return "send a text or a list of texts"


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
    if isinstance(inputs, list):
        if not inputs:
            raise ClientError(400, '"inputs" is an empty list; ' + _shape_hint(task))
        bad = [i for i, x in enumerate(inputs) if not _is_list_item(task, x)]
        if bad:
            raise ClientError(400, f'"inputs" item {bad[0]} has the wrong shape for {task}; '
                                   + _shape_hint(task))
        return Parsed(inputs, False, params)
    if not _is_text_input(task, inputs):
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

    Each request's answer must equal `pipeline(request.inputs, **params)`. A list in gives a
    list out (even of one), so a list request takes its slice of the merged answer; a single
    input's answer is its element, re-shaped by `_as_single` where the pipeline keeps a
    transformers quirk. A group of one request is passed through untouched.
    """

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.task = pipeline.task

    def __call__(self, requests: list[Parsed], params: dict) -> list:
        if len(requests) == 1:
            return [self.pipeline(requests[0].inputs, **params)]
        flat, spans = [], []
        for r in requests:
            items = [r.inputs] if r.single else list(r.inputs)
            spans.append((len(flat), len(items)))
            flat.extend(items)
        out = self.pipeline(flat, **params)
        if not isinstance(out, list) or len(out) != len(flat):
            raise RuntimeError(f"pipeline returned {type(out).__name__} of "
                               f"{len(out) if isinstance(out, list) else '?'} for {len(flat)} inputs")
        results = []
        for r, (start, n) in zip(requests, spans):
            part = out[start:start + n]
            results.append(self._as_single(r.inputs, part[0], params) if r.single else part)
        return results

    def _as_single(self, x, result, params: dict):
        # transformers' text-classification wraps a lone text's answer in a list unless top_k
        # was given ("This pipeline is odd" in its __call__); the other tasks return the element.
        if self.task == "text-classification" and isinstance(x, str) and "top_k" not in params:
            return [result]
        return result


def jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
