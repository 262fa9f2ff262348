"""GET /openapi.json, the server's OpenAPI 3.1 document, and GET /docs, Swagger UI on it.

The document is generated for the export being served from the route table (endpoints.py:
the app's `Endpoint` records whose tasks hold the export's task) and the task record: each
route's request body is a JSON schema (2020-12, OpenAPI 3.1's dialect) whose parameters come
from the record's `Param`s — type and bounds from their `Rule` (a bound the model decides, such
as QA's max_seq_len, at this model's value), the export's own default, the help, an example.
The /docs page is Swagger UI served by the server itself from the `swagger-ui-bundle-v2`
package's static files (the serve extra): no CDN, so it works offline and behind a firewall;
its "Try it out" calls this server. Reference: TEI's router/src/http/server.rs (utoipa's
document and SwaggerUi at /docs).
"""
from __future__ import annotations

import html
import re
from importlib import metadata

from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..core.tasks import TASKS, pipeline_class
from .endpoints import OPEN, Endpoint, literal, param_schema
from .openapi_several import several
from .v2 import VERSION
from .wire import served

try:  # Swagger UI's files (the serve extra); without them /docs says what to install
    from swagger_ui_bundle import swagger_ui_path
except ImportError:  # pragma: no cover — the serve extra installs it
    swagger_ui_path = None

STRING = {"type": "string"}
ANSWER = {"description": "The pipeline's answer: transformers' output for the task, one per "
                         "input for a list."}
ERROR = {"type": "object", "properties": {"error": STRING, "type": STRING},
         "required": ["error", "type"]}
LIMITS = {400: "A malformed request, or a bad input or parameter (named).",
          413: "Past a limit (--max-body-bytes, --max-inputs, --max-tokens, "
               "--max-context-chars), named with its flag.",
          503: "The model is loading, or the server is draining."}
# what the server's own guards answer, on the routes they guard (`document`)
UNAUTHORIZED = {401: "No API key, or not one of the server's (--api-key); the answer carries "
                     "WWW-Authenticate: Bearer."}
BUSY = {429: "The server holds --max-queued-inputs inputs already; retry after Retry-After "
             "seconds.",
        503: "The model is loading, the server is draining, or the request was not answered "
             "within --request-timeout-s (its work dropped)."}
# what reading any body may answer (app._Handlers.read_body)
READING = {408: "The body did not arrive within --body-timeout-s (the connection is closed)."}
NOT_READY = {503: "The model is loading, or the server is draining."}
OTHER_MODEL = {404: "Another model's name (or a version other than 1)."}
OPENAI_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type"],
    "properties": {"message": STRING, "type": STRING, "param": {"type": ["string", "null"]},
                   "code": {"type": ["string", "null"]}}}}}


# -- /predict: Hugging Face's convention, from the task record --------------------------------

SAMPLE = "Paris is the capital city of France."


def example_input(pipe):
    """One input of the task, from its record's example (`Task.example`)."""
    mask = getattr(pipe.tokenizer, "mask_token", None) or "[MASK]"
    return TASKS[pipe.task].example(SAMPLE, mask)


def inputs_schema(pipe) -> dict:
    """The task's JSON inputs from its record: its fields (`Task.inputs`), each typed as its
    example gives it (a text, or a list of texts), optional where its /v2 tensor is; a lone
    text for the one-text tasks (and where the other fields are optional), or a list of
    those."""
    cls = pipeline_class(pipe.task)
    fields = TASKS[pipe.task].inputs
    optional = {t.name for t in cls.tensors.inputs if t.optional}
    example = example_input(pipe)
    if fields == ("text",):
        one = STRING
    else:
        typed = {name: {"type": "array", "items": STRING, "minItems": 1}
                 if isinstance(example, dict) and isinstance(example.get(name), list)
                 else STRING for name in fields}
        record = {"type": "object", "properties": typed, "additionalProperties": False,
                  "required": [name for name in fields if name not in optional]}
        one = {"anyOf": [STRING, record]} if record["required"] == ["text"] else record
    return {"description": "Send " + cls.input_hint + ".",
            "anyOf": [one, {"type": "array", "items": one, "minItems": 1}]}


def required_examples(pipe, allowed) -> dict:
    """A working value of each parameter a call must give (zero-shot's candidate_labels)."""
    return {p.name: literal(p.rule.example) for p in TASKS[pipe.task].params
            if p.required and allowed(p)}


def predict_request(state) -> dict:
    pipe = state.pipeline
    record = TASKS[pipe.task]
    params = {p.name: param_schema(p, pipe) for p in record.params if p.request}
    required = [p.name for p in record.params if p.request and p.required]
    return {"type": "object", "additionalProperties": False,
            "required": ["inputs", *(["parameters"] if required else [])],
            "properties": {"inputs": inputs_schema(pipe),
                           "parameters": {"type": "object", "properties": params,
                                          "required": required,
                                          "additionalProperties": False,
                                          "description": "The pipeline's keyword arguments; "
                                                         "left out, the export's defaults."}}}


def predict_example(state):
    pipe = state.pipeline
    params = required_examples(pipe, lambda p: p.request)
    return {"inputs": example_input(pipe), **({"parameters": params} if params else {})}


# -- the other protocols' routes (openai.py, v2.py) -----------------------------------------

def embeddings_request(state) -> dict:
    return {"type": "object", "required": ["input", "model"], "additionalProperties": False,
            "properties": {
                "input": {"anyOf": [STRING, {"type": "array", "items": STRING,
                                             "minItems": 1}]},
                "model": {"type": "string", "enum": [state.name]},
                "encoding_format": {"type": "string", "enum": ["float", "base64"],
                                    "default": "float"},
                "dimensions": {"type": "integer", "description": "The model's width only."},
                "user": STRING}}


def v2_request(state) -> dict:
    pipe = state.pipeline
    cls = pipeline_class(pipe.task)
    params = {p.name: param_schema(p, pipe) for p in TASKS[pipe.task].params
              if p.v2 is not False}
    tensor = {"type": "object", "required": ["name", "shape", "datatype"], "properties": {
        "name": {"type": "string", "enum": [t.name for t in cls.tensors.inputs]},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "datatype": {"type": "string", "enum": ["BYTES"]},
        "data": {"type": "array"}, "parameters": {"type": "object"}}}
    return {"type": "object", "required": ["inputs"], "properties": {
        "id": STRING, "inputs": {"type": "array", "items": tensor, "minItems": 1},
        "outputs": {"type": "array", "items": {"type": "object"}},
        "parameters": {"type": "object", "properties": params}}}


def v2_example(state):
    """The record's example input as tensors, where its fields are the tensors' (none for
    text-ranking, whose rows are pairs)."""
    pipe = state.pipeline
    example = example_input(pipe)
    tensors = [t.name for t in pipeline_class(pipe.task).tensors.inputs if not t.optional]
    values = {"text": example} if isinstance(example, str) else example
    if not all(isinstance(values.get(name), str) for name in tensors):
        return None
    params = required_examples(pipe, lambda p: p.v2 is not False)
    return {"inputs": [{"name": name, "shape": [1], "datatype": "BYTES",
                        "data": [values[name]]} for name in tensors],
            **({"parameters": params} if params else {})}


def _answer(schema: dict):
    return lambda state: schema


def _object(properties: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required}


INTEGER = {"type": "integer"}
MODEL = _object({"id": STRING, "object": {"const": "model"}, "created": INTEGER,
                 "owned_by": STRING})
MODELS = _object({"object": {"const": "list"}, "data": {"type": "array", "items": MODEL}})
EMBEDDINGS = _object({
    "object": {"const": "list"}, "model": STRING,
    "data": {"type": "array", "items": _object({
        "object": {"const": "embedding"}, "index": INTEGER,
        "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}}, STRING],
                      "description": "Floats, or base64 of little-endian float32."}})},
    "usage": _object({"prompt_tokens": INTEGER, "total_tokens": INTEGER})})
TENSOR = _object({"name": STRING, "datatype": STRING,
                  "shape": {"type": "array", "items": INTEGER}})
V2_METADATA = _object({"name": STRING, "versions": {"type": "array", "items": STRING},
                       "platform": STRING, "inputs": {"type": "array", "items": TENSOR},
                       "outputs": {"type": "array", "items": TENSOR}})
V2_ANSWER = _object({"model_name": STRING, "model_version": STRING, "id": STRING,
                     "outputs": {"type": "array", "items": {"type": "object"}}},
                    ["model_name", "model_version", "outputs"])
V2 = "Open Inference Protocol v2"


def _v2_model_routes(base: str) -> tuple[Endpoint, ...]:
    """The model's v2 routes under `base` (/v2/models/{name}, or with /versions/{version})."""
    return (
        Endpoint("GET", base, "The model's tensors.", V2, response=_answer(V2_METADATA),
                 errors={**OTHER_MODEL, **NOT_READY}, error_schema="V2Error"),
        Endpoint("GET", base + "/ready", "The model's readiness (open with --api-key).", V2,
                 response=_answer(_object({"name": STRING, "ready": {"const": True}})),
                 errors={**OTHER_MODEL, **NOT_READY}, error_schema="V2Error"),
        Endpoint("POST", base + "/infer", "Inference on tensors of text.", V2, None,
                 v2_request, v2_example, _answer(V2_ANSWER), {**LIMITS, **OTHER_MODEL},
                 "V2Error", ("application/json", "application/octet-stream")))


ENDPOINTS = (
    Endpoint("POST", "/predict", "The task's answer (Hugging Face's inference convention).",
             "bertonnx", None, predict_request, predict_example, _answer(ANSWER), LIMITS,
             "Error"),
    Endpoint("GET", "/health", "503 while the model loads, 200 once it answers.", "bertonnx",
             response=_answer(_object({"status": STRING, "task": STRING}, ["status"])),
             errors={503: "Loading, failed to load, or draining: {\"status\"}."}),
    Endpoint("GET", "/metrics", "Prometheus text.", "bertonnx", response=_answer(STRING),
             media_types=("text/plain",)),
    Endpoint("GET", "/openapi.json", "This document.", "bertonnx",
             response=_answer({"type": "object"}), errors=NOT_READY, error_schema="Error"),
    Endpoint("POST", "/v1/embeddings", "OpenAI's embeddings API.", "OpenAI",
             ("feature-extraction", "bge-m3"), embeddings_request,
             lambda state: {"input": "What is Deep Learning?", "model": state.name},
             _answer(EMBEDDINGS),
             {**LIMITS, 404: "model_not_found: another model's name (GET /v1/models)."},
             "OpenAIError"),
    # every export answers OpenAI's model list: clients list models before they call
    Endpoint("GET", "/v1/models", "The served model (OpenAI's list).", "OpenAI",
             response=_answer(MODELS), errors=NOT_READY, error_schema="OpenAIError"),
    Endpoint("GET", "/v1/models/{model}", "The served model (OpenAI's retrieve).", "OpenAI",
             response=_answer(MODEL),
             errors={404: "model_not_found: another model's id.", **NOT_READY},
             error_schema="OpenAIError"),
    Endpoint("GET", "/v2", "The server: name, version, protocol extensions.", V2,
             response=_answer(_object({"name": STRING, "version": STRING,
                                       "extensions": {"type": "array", "items": STRING}}))),
    Endpoint("GET", "/v2/health/live", "Liveness: 200 while the process runs.", V2,
             response=_answer(_object({"live": {"const": True}}))),
    Endpoint("GET", "/v2/health/ready", "Readiness: 200 once the model answers.", V2,
             response=_answer(_object({"ready": {"const": True}})), errors=NOT_READY,
             error_schema="V2Error"),
    *_v2_model_routes("/v2/models/{name}"),
    *_v2_model_routes("/v2/models/{name}/versions/{version}"),
)
# a path parameter's one accepted value, by name (the served model's name otherwise)
PATH_VALUES = {"version": lambda state: VERSION}


# -- the document ----------------------------------------------------------------------------

def document(state, table: tuple[Endpoint, ...], components: dict) -> dict:
    """The OpenAPI 3.1 document of the routes `table` holds for the export being served."""
    pipe = state.pipeline
    try:
        version = metadata.version("bertonnx")
    except metadata.PackageNotFoundError:
        version = "unknown"
    keys = bool(state.options.access.api_keys)
    paths: dict[str, dict] = {}
    for e in table:
        if e.serves(pipe.task):
            guarded = keys and e.path not in OPEN
            # every route with a body is read, then goes through the queue's admission
            # (app._Handlers.infer)
            extra = {**(READING if e.request is not None else {}),
                     **(BUSY if e.request is not None else {}),
                     **(UNAUTHORIZED if guarded else {})}
            op = _operation(e, state, extra)
            if guarded:
                op["security"] = [{"bearer": []}]
            paths.setdefault(e.path, {})[e.method.lower()] = op
    security = {"securitySchemes": {"bearer": {
        "type": "http", "scheme": "bearer",
        "description": "One of the keys given to `bertonnx serve --api-key`."}}} if keys else {}
    return {"openapi": "3.1.0",
            "info": {"title": f"bertonnx serve: {state.name}", "version": version,
                     "description": f"A {pipe.task} export served by bertonnx: "
                                    f"{TASKS[pipe.task].summary} The routes below are the "
                                    "ones this export answers."},
            "paths": paths,
            "components": {"schemas": {"Error": ERROR, "V2Error": {
                "type": "object", "properties": {"error": STRING}, "required": ["error"]},
                "OpenAIError": OPENAI_ERROR, **components}, **security}}


def _operation(e: Endpoint, state, extra: dict[int, str]) -> dict:
    """The route's operation; `extra`: responses the server's guards add (401, 429, 503)."""
    op = {"operationId": e.method.lower() + re.sub(r"\W+", "_", e.path).rstrip("_"),
          "summary": e.summary, "tags": [e.tag]}
    names = re.findall(r"{(\w+)}", e.path)
    if names:   # the one model's name (and version) is the only one the server answers
        op["parameters"] = [{"name": n, "in": "path", "required": True, "schema": {
            "type": "string", "enum": [PATH_VALUES.get(n, lambda s: s.name)(state)]}}
            for n in names]
    if e.request is not None:
        body = {"schema": e.request(state)}
        example = e.example(state) if e.example is not None else None
        if example is not None:
            body["example"] = example
        op["requestBody"] = {"required": True, "content": {"application/json": body}}
    ok = {"description": "OK"}
    if e.response is not None:   # the schema is the first media type's
        first, *others = e.media_types
        ok["content"] = {first: {"schema": e.response(state)}, **{m: {} for m in others}}
    op["responses"] = {"200": ok}
    for status, why in {**e.errors, **extra}.items():
        answer = {"description": why}
        if e.error_schema:
            answer["content"] = {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{e.error_schema}"}}}
        op["responses"][str(status)] = answer
    return op


# -- the routes ------------------------------------------------------------------------------

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bertonnx serve: {name}</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css">
<link rel="icon" href="/docs/static/favicon-32x32.png"></head>
<body><div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({{url: "/openapi.json", dom_id: "#swagger-ui",
  deepLinking: true, tryItOutEnabled: true}});</script>
</body></html>
"""


def routes(h, table: tuple[Endpoint, ...], components: dict) -> list:
    """/openapi.json (the model's routes: 503 until it is loaded) and /docs with its files."""
    state = h.state

    async def openapi(request):
        if not state.ready:
            return JSONResponse({"error": "the model is still loading; retry shortly",
                                 "type": "NotReady"}, 503, headers={"Retry-After": "1"})
        models, name = state.models, request.query_params.get("model")
        if name is not None and models.get(name) is None:
            return JSONResponse({"error": f"model {name[:80]!r} is not served here: this "
                                          f"server serves {served(models.names)}",
                                 "type": "ModelNotFound"}, 404)
        if name is not None or len(models) == 1:   # one model's document
            return JSONResponse(document(models.get(name) or models.first, table, components))
        return JSONResponse(several([document(m, table, components) for m in models],
                                    models.names))

    async def docs(request):
        if swagger_ui_path is None:
            return JSONResponse({"error": "/docs needs Swagger UI's files: pip install "
                                          "swagger-ui-bundle-v2 (the serve extra)",
                                 "type": "NotInstalled"}, 404)
        return HTMLResponse(_PAGE.format(name=html.escape(state.name)))

    out = [Route("/openapi.json", openapi, methods=["GET"]),
           Route("/docs", docs, methods=["GET"])]
    if swagger_ui_path is not None:
        out.append(Mount("/docs/static", StaticFiles(directory=str(swagger_ui_path)),
                         name="swagger-ui"))
    return out
