"""The server's routes as records: which exports serve each one, and what /openapi.json says
about it.

An `Endpoint` names its method and path, the tasks whose exports serve it (`tasks`; None:
every export) and its OpenAPI entry: a summary, the JSON schema of its request body derived
for the pipeline being served (the task record's parameters, their rules, defaults and help),
a working example body and its answer's schema. The route table of an export is the endpoints
whose `tasks` hold its task: a route of another task answers 404 naming the export it needs
(`not_served`), and /openapi.json lists only the routes the export answers (openapi.py).
Reference: TEI's router/src/http/server.rs, where each route's handler, request and response
types are declared once and the OpenAPI document is generated from them.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..core.parameters import INT_LIMIT, Rule
from ..core.tasks import Param
from .wire import FieldError

# The routes answered without an API key (as OpenAPI writes them; auth.py applies it, the
# document leaves their security out): liveness and readiness probes, which say nothing but
# whether the model is loaded. Here, not in auth.py: openapi.py reads it, and auth.py reads the
# protocols' route tables, which openapi.py's document is built beside.
OPEN = ("/health", "/v2/health/live", "/v2/health/ready", "/v2/models/{name}/ready",
        "/v2/models/{name}/versions/{version}/ready")

# what each retrieval task's export is made from, for the refusal of a route an export lacks
_EXPORTS = {"feature-extraction": "a sentence embedding model",
            "text-ranking": "a cross-encoder", "sparse-embedding": "a SPLADE model"}


@dataclass(frozen=True)
class Endpoint:
    """One route: who serves it and how the OpenAPI document describes it."""

    method: str                  # "GET" or "POST"
    path: str                    # as OpenAPI writes it: /v2/models/{name}
    summary: str
    tag: str                     # the protocol it belongs to (the document's sections)
    tasks: tuple[str, ...] | None = None   # the tasks whose exports serve it; None: all
    # each a function of a served model (registry.Model: its pipeline, the limits):
    request: Callable[[Any], dict] | None = None    # the body's JSON schema (None: no body)
    example: Callable[[Any], Any] | None = None     # a body that works as it is (None: none)
    response: Callable[[Any], dict] | None = None   # the schema of the 200 answer
    errors: Mapping[int, str] = field(default_factory=dict)  # status -> when it is answered
    error_schema: str | None = None   # components/schemas name of its error body
    # the 200 answer's media types; `response` is the first's schema (v2's binary tensor data
    # answers application/octet-stream, /metrics Prometheus text)
    media_types: tuple[str, ...] = ("application/json",)

    def serves(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks


def not_served(endpoint: Endpoint, task: str, name: str | None = None) -> FieldError:
    """The refusal for a route the export's task does not serve: 404 (the route does not exist
    for this export) with TEI's error type for a model of the wrong kind, naming the export the
    route needs (and the model asked for, `name`, where the server has several)."""
    wanted = " or ".join(f"{t} export (of {_EXPORTS[t]})" if t in _EXPORTS else f"{t} export"
                         for t in endpoint.tasks or ())
    subject = f"the model {name!r} is a" if name else "this server serves a"
    return FieldError(404, f"{subject} {task} export, which does not answer "
                           f"{endpoint.method} {endpoint.path}: that route needs a {wanted}, "
                           f"e.g. bertonnx export MODEL --task {endpoint.tasks[0]}; GET "
                           "/openapi.json lists the routes this export answers",
                      None, "NotServed")


def check_served(endpoint: Endpoint, state) -> None:
    """FieldError(404) unless the loaded export's task serves `endpoint`."""
    task = state.pipeline.task
    if not endpoint.serves(task):
        raise not_served(endpoint, task, state.name if getattr(state, "several", False)
                         else None)


# -- a parameter's JSON schema, from its record ---------------------------------------------

def _int(rule: Rule, pipe) -> dict:
    top = rule.limit(pipe) if rule.limit is not None else rule.high
    return {"type": "integer", "minimum": rule.low, "maximum": INT_LIMIT if top is None else top}


def _strings(rule: Rule, pipe) -> dict:
    listed = {"type": "array", "items": {"type": "string"}}
    # some take one string as well (fill-mask's targets)
    return {"anyOf": [{"type": "string"}, listed]} if rule.ok("word", pipe) is None else listed


def _joined(rule: Rule, pipe) -> dict:
    """Options alone or joined by "+" (feature-extraction's pooling), as a pattern."""
    joinable = [o for o in rule.options if rule.ok(f"{o}+{o}", pipe) is None]
    alone = [o for o in rule.options if o not in joinable]
    one = "|".join(map(re.escape, joinable))
    return {"type": "string", "pattern": f"^(({one})(\\+({one}))*"
            + "".join(f"|{re.escape(a)}" for a in alone) + ")$", "examples": list(rule.options)}


# Rule.kind -> its JSON schema (runtime/core/parameters.py); "other" rules say it in words
_KINDS: Mapping[str, Callable[[Rule, Any], dict]] = {
    "int": _int,
    "bool": lambda rule, pipe: {"type": "boolean"},
    "choice": lambda rule, pipe: {"type": "string", "enum": list(rule.options)},
    "joined": _joined,
    "text": lambda rule, pipe: {"type": "string"},
    "strings": _strings,
}


def rule_schema(rule: Rule, pipe) -> dict:
    """What `rule` takes, as JSON Schema (2020-12, OpenAPI 3.1's dialect): type, bounds,
    options, and null where the rule takes null."""
    if rule.kind not in _KINDS:   # "other": its help says what it takes
        return {}
    schema = _KINDS[rule.kind](rule, pipe)
    if rule.ok(None, pipe) is None:
        schema = {"anyOf": [schema, {"type": "null"}]}
    return schema


_OWN = object()   # param_schema's default: the export's own


def param_schema(param: Param, pipe, default: Any = _OWN) -> dict:
    """One parameter's schema from its record: the rule's type and limits, the help, the
    export's own default (`pipe.defaults`, unless `default` is given) and the rule's example."""
    schema = {**rule_schema(param.rule, pipe), "description": param.help}
    own = getattr(pipe, "defaults", {})   # a pipeline's, over its record's
    value = own.get(param.name, param.default) if default is _OWN else default
    if _is_json(value):
        schema["default"] = value
    example = literal(param.rule.example)
    if example is not None:
        schema["examples"] = [example]
    return schema


def _is_json(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, list, dict))


def literal(text: str):
    """A rule's example ("5", "'mean'", '["PER", "LOC"]', "true") as a JSON value."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return value if _is_json(value) else None
