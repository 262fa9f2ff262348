"""POST /embed_multi: ColBERT token vectors (the multi-vector task), in TEI's style:

    POST /embed_multi   multi-vector   {"inputs": str | [str], "is_query"?: false,
                                        "normalize"?: true, "pool_factor"?: 1,
                                        "protected_tokens"?: 1, "encoding_format"?: "float"}
                                        -> [[[float]]]: per text, its kept tokens' vectors

`is_query`, `normalize`, `pool_factor` and `protected_tokens` are the task's parameters
(runtime/core/tasks.py: a document unless is_query, unit vectors by default, a document's tokens
pooled as PyLate's encode pools them with a pool_factor past 1); texts are cut at the model's query or document length as
PyLate cuts them (pipelines/multi_vector.py). A text's (tokens × dim) floats are many: with
`encoding_format` "base64" (OpenAI's embeddings option) each text is instead one string, the
base64 of its vectors as little-endian float32, row after row — (tokens × dim) × 4 bytes, a
third of the JSON text, and no float formatting on either side:

    np.frombuffer(base64.b64decode(s), "<f4").reshape(-1, dim)

TEI has no such route; the request's fields are TEI's /embed ones where they are the same.
"""
from __future__ import annotations

import base64

import numpy as np
from starlette.responses import Response

from ..core.tasks import TASKS
from .endpoints import Endpoint, check_served, param_schema
from .protocol import Parsed, json_bytes
from .tei import (TAG, TeiWire, invalid, object_schema, read_bool, read_object, read_texts,
                  texts_schema)
from .wire import Call

FORMATS = ("float", "base64")


def encoded(vectors: np.ndarray, encoding_format: str):
    """One text's (tokens, dim) vectors as JSON writes them: nested lists, or one base64
    string of its little-endian float32 bytes."""
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vectors, "<f4").tobytes()).decode("ascii")
    return np.asarray(vectors, np.float32).tolist()


class EmbedMultiWire(TeiWire):
    name = "tei-embed-multi"
    FIELDS = frozenset({"inputs", "is_query", "normalize", "pool_factor", "protected_tokens",
                        "encoding_format"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("inputs",))
        texts = read_texts(data["inputs"], "inputs", state.options.limits.max_inputs)
        encoding_format = data.get("encoding_format", "float")
        if encoding_format not in FORMATS:
            raise invalid(f"`encoding_format` must be one of {', '.join(FORMATS)}, got "
                          f"{str(encoding_format)[:40]!r}", "encoding_format")
        params = {"is_query": read_bool(data, "is_query", False),
                  "normalize": read_bool(data, "normalize", True),
                  # judged by the task's rules, as every call's parameters
                  **{k: data[k] for k in ("pool_factor", "protected_tokens") if k in data}}
        return Call(Parsed(texts, False, params), encoding_format)

    def respond(self, answer, call: Call, work):
        return Response(json_bytes([encoded(v, call.context) for v in answer]), 200,
                        media_type="application/json")


def embed_multi_request(state) -> dict:
    params = TASKS["multi-vector"].parameters
    return object_schema({
        "inputs": texts_schema(state),
        "is_query": param_schema(params["is_query"], state.pipeline, default=False),
        "normalize": param_schema(params["normalize"], state.pipeline, default=True),
        **{k: param_schema(params[k], state.pipeline) for k in ("pool_factor",
                                                               "protected_tokens")},
        "encoding_format": {"type": "string", "enum": list(FORMATS), "default": "float",
                            "description": "float: nested lists; base64: per text, its "
                                           "little-endian float32 vectors, row after row."}},
        ["inputs"])


TOKEN_MATRICES = {"type": "array", "items": {"anyOf": [
    {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
    {"type": "string", "description": "base64 of (tokens × dim) little-endian float32"}]}}

EMBED_MULTI = Endpoint("POST", "/embed_multi", "ColBERT token vectors (multi-vector).", TAG,
                       ("multi-vector", "bge-m3"), embed_multi_request,
                       lambda state: {"inputs": "What is Deep Learning?", "is_query": True},
                       lambda state: TOKEN_MATRICES,
                       {413: "A body past --max-body-bytes.",
                        422: "Input validation error, named in the message.",
                        400: "An empty batch.", 503: "The model is loading, or the server is "
                                                     "draining.",
                        404: "Not a multi-vector export."}, "TeiError")
WIRE = EmbedMultiWire(EMBED_MULTI)
