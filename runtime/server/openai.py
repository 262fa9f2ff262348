"""OpenAI's embeddings API on a feature-extraction export: what the `openai` package, LangChain's
and LlamaIndex's OpenAI embeddings send.

    POST /v1/embeddings     {"input": str | [str], "model", "encoding_format"?, "dimensions"?,
                             "user"?} -> {"object": "list", "data": [{"object": "embedding",
                             "index", "embedding"}], "model", "usage": {"prompt_tokens",
                             "total_tokens"}}
    GET  /v1/models         {"object": "list", "data": [{"id", "object": "model", "created",
                             "owned_by"}]}: every model served
    GET  /v1/models/{id}    that model, or 404

Vectors are the export's sentence embeddings with its defaults, as every entry point gives
them — the library's `pipe(texts)`, run through the same batcher as /predict: mean pooled
and unit length (OpenAI's own embeddings are unit length, and clients take the dot product
as the cosine), or, for an export of a sentence-transformers folder, pooled and normalised as
that folder says. OpenAI's request has no parameter for either; `dimensions` keeps the first N
values, renormalized (sentence-transformers' truncate_dim; a model whose folder declares
matryoshka_dimensions takes only those). `encoding_format` "base64" is
the vector's little-endian float32 bytes, as the openai client decodes them (it asks for base64
unless told otherwise). Usage counts the tokens the model ran (special tokens included, texts
past the model's length truncated as the library truncates them). Refusals are OpenAI's error
object `{"error": {"message", "type", "param", "code"}}`. Reference: OpenAI's API reference,
"Embeddings" and "Models"; the openai-python client (`resources/embeddings.py`).
"""
from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.quantize_embeddings import base64_floats
from ..core.tensors import hidden_size
from .bge_m3 import TASK as M3_TASK, M3Output
from .protocol import Parsed, json_bytes
from .wire import ANY_METHOD, Call, FieldError, Wire, served

TASK = "feature-extraction"
FIELDS = {"input", "model", "encoding_format", "dimensions", "user"}
FORMATS = ("float", "base64")
OWNER = "bertonnx"


def _field(message: str, field: str | None, status: int = 400, kind: str = "InputError"):
    return FieldError(status, message, field, kind)


def _code(kind: str) -> str:
    """InputError -> input_error: our error kinds in OpenAI's snake_case codes."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def error_response(status: int, message: str, kind: str, headers: dict | None = None,
                   parameter: str | None = None):
    """OpenAI's error object: `type` invalid_request_error for what the client can fix,
    server_error for the rest; `code` names our kind of error."""
    kind_of = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse({"error": {"message": message, "type": kind_of, "param": parameter,
                                   "code": _code(kind)}}, status, headers=headers)


def model_not_found(name: str, names: list[str]):
    return error_response(404, f"The model {name!r} does not exist: this server serves "
                               f"{served(names)} (GET /v1/models)", "ModelNotFound",
                          parameter="model")


class EmbeddingsWire(Wire):
    name = "openai"
    # a BGE-M3 export answers with its dense vectors (bge_m3.M3Output)
    tasks = (TASK, M3_TASK)

    def unknown_model(self, name, names):
        return _field(f"The model {name!r} does not exist: this server serves "
                      f"{served(names)} (GET /v1/models)", "model", 404, "ModelNotFound")

    def parse(self, state, request, body: bytes) -> Call:
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise _field(f"the body is not valid JSON ({str(e)[:120]})", None,
                         kind="InvalidJson") from None
        if not isinstance(data, dict):
            raise _field('the body must be a JSON object {"input": ..., "model": ...}', None,
                         kind="InvalidRequest")
        extra = sorted(set(data) - FIELDS)
        if extra:
            raise _field(f"Unrecognized request argument supplied: {', '.join(extra)} "
                         f"(this server reads {', '.join(sorted(FIELDS))})", extra[0])
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise _field("you must provide a model parameter: the served model's id, "
                         f"{state.name!r} (GET /v1/models)", "model")
        if model != state.name:
            raise _field(f"The model {model!r} does not exist: this server serves "
                         f"{state.name!r} (GET /v1/models)", "model", 404, "ModelNotFound")
        task = state.pipeline.task
        if task not in self.tasks:
            raise _field(f"the model {state.name!r} is a {task} export; /v1/embeddings needs a "
                         f"feature-extraction export (bertonnx export MODEL --task {TASK}); "
                         "this one answers POST /predict and /v2/models/NAME/infer",
                         "model", kind="ModelNotSupported")
        texts = _texts(data.get("input"))
        encoding = data.get("encoding_format", "float")
        if encoding not in FORMATS:
            raise _field(f"encoding_format must be 'float' or 'base64', got {encoding!r:.40}",
                         "encoding_format")
        dimensions = data.get("dimensions")
        if dimensions is not None:
            width = hidden_size(state.pipeline)
            if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
                raise _field(f"dimensions must be a positive integer, got {dimensions!r:.40}",
                             "dimensions")
            if dimensions > width:
                raise _field(f"dimensions {dimensions} is more than this model's {width}; pass "
                             f"at most {width}, or leave dimensions out", "dimensions")
        user = data.get("user")
        if user is not None and not isinstance(user, str):
            raise _field("user must be a string", "user")
        # the export's defaults, the vectors /predict and load() give; `dimensions` cuts them
        # (renormalized; a Matryoshka model's own sizes only: the pipeline's check)
        params = {} if dimensions is None else {"dimensions": dimensions}
        return Call(Parsed(texts, False, params), (encoding, state.name))

    def respond(self, answer, call: Call, work):
        encoding, model = call.context
        data = [{"object": "embedding", "index": i, "embedding": _encode(vector, encoding)}
                for i, vector in enumerate(answer)]
        body = {"object": "list", "data": data, "model": model,
                "usage": {"prompt_tokens": work.tokens, "total_tokens": work.tokens}}
        return Response(json_bytes(body), 200, media_type="application/json")

    def error(self, status, message, kind, headers=None, parameter=None):
        # the pipeline's own InputErrors (an empty text) are about the input
        if parameter is None and kind == "InputError" and status == 400:
            parameter = "input"
        return error_response(status, message, kind, headers, parameter)


EMBEDDINGS = M3Output(EmbeddingsWire(), "dense_vecs")


def _texts(value) -> list[str]:
    """`input` as a list of texts; token-id arrays are refused (they are another tokenizer's
    ids — tiktoken's — which this model cannot read)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(t, str) for t in value):
        return value
    if isinstance(value, list) and value and all(
            isinstance(t, int) or (isinstance(t, list) and all(isinstance(i, int) for i in t))
            for t in value):
        raise _field("input holds token ids; this server tokenizes text with the model's own "
                     "tokenizer, so send the texts as strings (LangChain's OpenAIEmbeddings: "
                     "pass check_embedding_ctx_length=False)", "input")
    if isinstance(value, list) and not value:
        raise _field("input is an empty list; send a string or a list of strings", "input")
    raise _field("input must be a string or a list of strings", "input")


def _encode(vector, encoding: str):
    return base64_floats(vector) if encoding == "base64" else vector


def model_record(state) -> dict[str, Any]:
    """A served model (registry.Model) as OpenAI's Model object; `created` is when it was
    exported."""
    try:
        created = int(datetime.fromisoformat(state.pipeline.folder.manifest.created).timestamp())
    except (TypeError, ValueError):
        created = int(state.pipeline.folder.model_path.stat().st_mtime)
    return {"id": state.name, "object": "model", "created": created, "owned_by": OWNER}


def routes(h) -> list:
    """The /v1 routes on the app's handlers `h` (app._Handlers)."""
    state = h.state

    async def embeddings(request):
        return await h.infer(request, EMBEDDINGS)

    def not_ready():
        if state.ready and not state.draining:
            return None
        return error_response(503, "the model is still loading; retry shortly"
                              if not state.ready else "the server is shutting down",
                              "NotReady", {"Retry-After": "1"})

    async def models(request):
        return not_ready() or JSONResponse({"object": "list",
                                            "data": [model_record(m) for m in state.models]})

    async def model(request):
        name = request.path_params["model"]
        entry = state.models.get(name)
        if entry is None:
            return model_not_found(name, state.models.names)
        return not_ready() or JSONResponse(model_record(entry))

    async def unknown(request):
        return error_response(404, f"no route {request.method} {request.url.path}: this server "
                                   "answers POST /v1/embeddings and GET /v1/models",
                              "NotFound")

    return [Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),
            Route("/v1/{rest:path}", unknown, methods=ANY_METHOD)]

