"""The request protocol: Hugging Face's inference-API convention in, the pipeline's own
output JSON out, and the errors a client gets (status, one line, a type).

A request is judged in full before it is queued: its JSON shape (`parse_request`), its inputs
and parameters by the task's own rules (`Pipeline.read_inputs`, `check_parameters`), and what
it would cost against the server's limits (`Prepared.of`, by `Pipeline.work`). What reaches
the batcher is a list of read inputs with checked parameters, cut in parts of at most
--part-size inputs (BatchConfig.part)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import orjson

from ..core.tasks import TASKS, pipeline_class

from ..core.errors import InputError
from .batching import PayloadError
from .settings import Limits, flag

# -- errors ----------------------------------------------------------------------------------


class ClientError(Exception):
    """A request the server refuses: HTTP status and one line for the client (`headers`: any
    the answer must carry, e.g. connection: close after a body that timed out)."""

    def __init__(self, status: int, message: str, kind: str = "InputError",
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.headers = status, message, kind, headers


def json_bytes(value, default=None) -> bytes:
    """An answer as JSON, by orjson: 18× json.dumps on an embedding (384 floats: 9 vs 164 µs),
    which at one text per request was a fifth of the event loop's busy time. The same numbers:
    floats are Python floats, written in their shortest round-trip form by either (orjson
    writes 1e-5 where json writes 1e-05; both read back as the same double). Keys that are
    not strings become strings, as json.dumps makes them."""
    return orjson.dumps(value, default=default, option=orjson.OPT_NON_STR_KEYS)


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


def parse_request(task: str, body: bytes, allowed: frozenset[str] | None,
                  max_inputs: int | None = None) -> Parsed:
    """Validate a /predict body; ClientError(400) names what is wrong and how to fix it."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ClientError(400, f"body is not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise ClientError(400, 'body must be a JSON object {"inputs": ..., "parameters": {...}}')
    # `model`: which of the server's models answers (app.py picks it by this name)
    extra = set(data) - {"inputs", "parameters", "model"}
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
        if max_inputs is not None and len(inputs) > max_inputs:
            raise _over("max_inputs", f"{len(inputs)} inputs", max_inputs)
        bad = [i for i, x in enumerate(inputs) if not rules.is_json_input(x, in_list=True)]
        if bad:
            raise ClientError(400, f'"inputs" item {bad[0]} has the wrong shape for {task}; '
                                   + _shape_hint(task))
        return Parsed(inputs, False, params)
    if not rules.is_json_input(inputs):
        raise ClientError(400, f'"inputs" has the wrong shape for {task}; ' + _shape_hint(task))
    return Parsed(inputs, True, params)


def _over(limit: str, what: str, value: int, status: int = 413) -> ClientError:
    """The refusal for a request past one of the Limits: names the limit and its flag."""
    return ClientError(status, f"{what} is over the limit of {value} per request ({flag(limit)} "
                               f"{value}); split the request, or raise {flag(limit)}",
                       "LimitExceeded" if status == 413 else "InputError")


@dataclass(frozen=True)
class Prepared:
    """A request read and checked, ready to queue: its inputs by the task's rules (`read`)
    and its parameters; `cut` gives the parts the batcher runs one after another."""

    read: Any            # pipelines.inputs.Inputs
    params: dict
    count: Callable = len   # the pipeline's count of a part's inputs (Pipeline.count)

    @classmethod
    def check(cls, pipe, parsed: Parsed, limits: Limits) -> "Prepared":
        """Read, validate and price `parsed` (cheap, no tokenizing: call on the event loop);
        `price` then tokenizes. ClientError / InputError name what is wrong."""
        read = pipe.read_inputs(parsed.inputs)
        count = pipe.count(read)
        if count > limits.max_inputs:
            raise _over("max_inputs", f"{count} {pipe.counted}", limits.max_inputs)
        pipe.check_parameters(**parsed.params)
        chars = pipe.windowed_chars(read)
        if chars > limits.max_context_chars:
            raise _over("max_context_chars", f"{chars} characters of context",
                        limits.max_context_chars)
        return cls(read, parsed.params, pipe.count)

    def price(self, pipe, limits: Limits):
        """What the call would cost (Pipeline.work tokenizes; the inputs' own errors come out
        here, before the request is queued) against the token and answer limits; returns
        that `Work` (OpenAI's usage counts its tokens)."""
        work = pipe.work(self.read, **self.params)
        if work.tokens > limits.max_tokens:
            raise _over("max_tokens", f"{work.tokens} tokens", limits.max_tokens)
        if work.answers > limits.max_answers:
            raise _over("max_answers", f"{work.answers} answers (top_k × masks or questions)",
                        limits.max_answers, status=400)
        return work

    def cut(self, size: int) -> list:
        """The inputs in parts of at most `size` records (the batcher's fairness unit), each
        with its size: the inputs it holds, as --max-inputs counts them."""
        records, count = self.read.records, self.count
        parts = [type(self.read)(records[i:i + size], single=False)
                 for i in range(0, len(records), size)]
        return [(part, count(part)) for part in parts]

    def answer(self, pipe, results: list):
        """The request's answer from its parts' results, shaped by the task's rule."""
        return pipe.unwrap([r for part in results for r in part], self.read, **self.params)


def allowed_parameters(pipeline) -> frozenset[str]:
    """What a request's "parameters" may set: the task record's request parameters (batching
    is the server's, numpy arrays mean nothing in JSON)."""
    return TASKS[pipeline.task].request_parameters


# -- one pipeline call for many requests -----------------------------------------------------


class PipelineRunner:
    """Runs a group of parts (same parameters) as ONE pipeline call and splits the answer.

    Each part is read inputs (`Prepared.cut`); they go in as one list and the call's results
    are cut back per part, one result per input, for `Prepared.answer` to shape. An InputError
    that names its input (`index`) becomes a PayloadError naming the part that sent it, so the
    batcher fails that part alone.
    """

    def __init__(self, pipeline):
        self.pipeline = pipeline
        self.task = pipeline.task

    def __call__(self, parts: list, params: dict) -> list:
        # imported with the model, not the server package (pipelines bring onnxruntime)
        from ..core.pipelines.inputs import Inputs

        merged = parts[0] if len(parts) == 1 else Inputs.concat(parts)
        try:
            out = self.pipeline(merged, **params)
        except InputError as e:
            if e.index is None or len(parts) == 1:
                raise
            ends = np.cumsum([len(p) for p in parts])
            raise PayloadError(int(np.searchsorted(ends, e.index, side="right")), e) from e
        if not isinstance(out, list) or len(out) != len(merged):
            raise RuntimeError(f"pipeline returned {type(out).__name__} of "
                               f"{len(out) if isinstance(out, list) else '?'} for "
                               f"{len(merged)} inputs")
        return Inputs.split(out, parts)
