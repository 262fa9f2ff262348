"""Cohere's rerank and embed APIs (v2) on a text-ranking and a feature-extraction export: what
the `cohere` package's `ClientV2(base_url=...).rerank(...)` and `.embed(...)` and the frameworks
built on them (LangChain's CohereRerank and CohereEmbeddings, LlamaIndex's) send. /v2/embed is
in cohere_embed.py.

    POST /v2/rerank   {"model", "query", "documents": [str], "top_n"?, "max_tokens_per_doc"?,
                       "priority"?} -> {"id", "results": [{"index", "relevance_score"}],
                       "meta": {"api_version": {"version": "2"}, "tokens": {"input_tokens"}}}

Results are the cross-encoder's (pipelines/text_ranking.py), best first, the best `top_n`;
relevance scores through its activation (sigmoid unless the model folder names another: in
[0, 1], as Cohere's). `model` must be the served name (--name; another is a 404), as on
/v1/embeddings. `max_tokens_per_doc` cuts each document to its first N tokens (the model
cuts every pair to its own length anyway); `priority` is accepted and ignored (one queue);
`relevant_spans` is refused when enabled. Each document counts against --max-inputs, and a
request past a limit is a 422 naming it; other refusals are 400, Cohere's error body
`{"id", "message"}`. Reference: the cohere SDK's v2 `rerank` (cohere/v2/raw_client.py) and its
V2RerankResponse type.

    POST /v2/embed    {"model", "input_type", "texts": [str], "embedding_types"?: ["float"],
                       "output_dimension"?, "truncate"?: "END", "max_tokens"?, "priority"?}
                       -> {"id", "response_type": "embeddings_by_type", "texts",
                       "embeddings": {type: [...]}, "meta": {"api_version", "billed_units"}}

The vectors are the export's defaults (`pipe(texts)`), after the prompt `input_type` names
where the model folder has one (INPUT_PROMPTS; otherwise its default prompt, as Cohere's older
models ignore input_type). `output_dimension` is the pipeline's `dimensions`; `truncate` START
cuts a long text's start, END (Cohere's default) its end, NONE refuses it (serve --long-inputs
chunk: embeds it whole as windows, x-windows counting them); `max_tokens` cuts
each text to that many tokens first. The embedding types are
runtime/core/quantize_embeddings.py's: int8/uint8 with the ranges calibrated at export for that
width (an export without them is refused: export it again). Reference: the cohere SDK's v2
`embed` and its EmbedByTypeResponse / EmbedByTypeResponseEmbeddings types.
"""
from __future__ import annotations

import json
import uuid

import numpy as np
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.quantize_embeddings import RANGED, base64_floats, quantize
from .endpoints import Endpoint, check_served
from .protocol import Parsed
from .wire import Call, FieldError, Wire, served, with_windows

TAG = "Cohere"
FIELDS = frozenset({"model", "query", "documents", "top_n", "max_tokens_per_doc",
                    "relevant_spans", "priority"})
STRING = {"type": "string"}


def _bad(message: str, field: str | None = None, status: int = 400,
         kind: str = "InvalidRequest") -> FieldError:
    return FieldError(status, message, field, kind)


def error(status: int, message: str, kind: str, headers=None, parameter=None):
    """Cohere's error body; a request past one of the server's limits is a 422."""
    if kind == "LimitExceeded":
        status = 422
    return JSONResponse({"id": str(uuid.uuid4()), "message": message}, status, headers=headers)


def _count(data: dict, field: str, low: int = 1) -> int | None:
    value = data.get(field)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < low):
        raise _bad(f"invalid request: {field} must be an integer of at least {low}", field)
    return value


def _read(endpoint: Endpoint, state, body: bytes, fields: frozenset,
          required: tuple[str, ...]) -> dict:
    """The body as a JSON object of known fields, every required one, naming the served model."""
    check_served(endpoint, state)
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise _bad(f"invalid request: the body is not valid JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise _bad("invalid request: the body must be a JSON object {"
                   + ", ".join(f'"{f}"' for f in required) + "}")
    extra = sorted(set(data) - fields)
    if extra:
        raise _bad(f"invalid request: unknown field(s) {', '.join(extra)}", extra[0])
    for field in required:
        if field not in data:
            raise _bad(f"invalid request: {field} is required", field)
    if data["model"] != state.name:
        raise _bad(f"model {str(data['model'])[:80]!r} not found: this server serves "
                   f"{state.name!r}", "model", 404, "ModelNotFound")
    return data


class CohereWire(Wire):
    """A Cohere route on the server's inference path: Cohere's errors; `endpoint` names the
    route and the exports that serve it."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint

    def error(self, status, message, kind, headers=None, parameter=None):
        return error(status, message, kind, headers, parameter)

    def unknown_model(self, name, names):
        return _bad(f"model {str(name)[:80]!r} not found: this server serves {served(names)}",
                    "model", 404, "ModelNotFound")


class RerankWire(CohereWire):
    name = "cohere-rerank"

    def parse(self, state, request, body: bytes) -> Call:
        data = _read(self.endpoint, state, body, FIELDS, ("model", "query", "documents"))
        query, documents = data["query"], data["documents"]
        if not isinstance(query, str):
            raise _bad("invalid request: query must be a string", "query")
        if not isinstance(documents, list) or not documents or not all(
                isinstance(d, str) for d in documents):
            raise _bad("invalid request: documents must be a non-empty list of strings",
                       "documents")
        spans = data.get("relevant_spans")
        if isinstance(spans, dict) and spans.get("mode") not in (None, "disabled"):
            raise _bad("invalid request: relevant_spans are not supported by this server's "
                       "cross-encoder; leave relevant_spans out", "relevant_spans")
        top_n = _count(data, "top_n")
        limit = _count(data, "max_tokens_per_doc")
        _count(data, "priority", low=0)
        if limit is not None and limit < state.pipeline.max_length:
            documents = _first_tokens(state.pipeline, documents, limit)
        # top_n past the documents gives them all, as Cohere's
        params = {} if top_n is None or top_n >= len(documents) else {"top_k": top_n}
        return Call(Parsed({"query": query, "documents": documents}, True, params))

    def respond(self, answer, call: Call, work):
        body = {"id": str(uuid.uuid4()),
                "results": [{"index": r["corpus_id"], "relevance_score": r["score"]}
                            for r in answer],
                "meta": {"api_version": {"version": "2"},
                         "tokens": {"input_tokens": work.tokens}}}
        return Response(json.dumps(body).encode(), 200, media_type="application/json")


def _first_tokens(pipe, documents: list[str], limit: int, last: bool = False) -> list[str]:
    """Each document cut after its first `limit` tokens (special tokens not counted); `last`:
    to its last `limit` tokens."""
    encodings = pipe.tokenizer.backend.encode_batch(documents, add_special_tokens=False)
    if last:
        return [d if len(e.ids) <= limit else d[e.offsets[-limit][0]:]
                for d, e in zip(documents, encodings)]
    return [d if len(e.ids) <= limit else d[:e.offsets[limit - 1][1]]
            for d, e in zip(documents, encodings)]


COUNT = {"type": "integer", "minimum": 1}
# the answers both routes share, beside their own 400 and 404
ANSWERS = {413: "A body past --max-body-bytes.",
           422: "Past a limit (--max-inputs, --max-tokens), named.",
           503: "The model is loading, or the server is draining."}


def _body(state, required: tuple[str, ...], listed: str, properties: dict) -> dict:
    """A v2 request body: `model` (this export's name), `required`, the list `listed` (at most
    --max-inputs), `priority` (accepted, ignored) and the route's own `properties`."""
    limit = state.options.limits.max_inputs
    return {"type": "object", "required": ["model", *required], "additionalProperties": False,
            "properties": {
                "model": {"type": "string", "enum": [state.name]},
                listed: {"type": "array", "items": STRING, "minItems": 1, "maxItems": limit,
                         "description": f"At most {limit} (--max-inputs)."},
                "priority": {"type": "integer", "minimum": 0,
                             "description": "Accepted, ignored (one queue)."},
                **properties}}


def request_schema(state) -> dict:
    return _body(state, ("query", "documents"), "documents", {
        "query": STRING,
        "top_n": {**COUNT, "description": "The best N (default: all)."},
        "max_tokens_per_doc": {**COUNT, "description": "Cut each document to its first N "
                                                       "tokens."},
        "relevant_spans": {"type": "object",
                           "description": "Not supported: \"enabled\" is refused."}})


# -- /v2/embed -------------------------------------------------------------------------------

EMBED_FIELDS = frozenset({"model", "input_type", "texts", "images", "inputs", "max_tokens",
                          "output_dimension", "embedding_types", "truncate", "priority"})
INPUT_TYPES = ("search_query", "search_document", "classification", "clustering")
# input_type -> the model folder's prompt names it means, the first one the folder has wins
# (sentence-transformers' own "query"/"document"; E5-style folders' "search_query", ...)
INPUT_PROMPTS = {"search_query": ("search_query", "query"),
                 "search_document": ("search_document", "document", "passage"),
                 "classification": ("classification",), "clustering": ("clustering",)}
EMBEDDING_TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")
# Cohere's truncate -> the pipeline's truncation_direction (NONE: refused past the model)
TRUNCATE = {"END": "right", "START": "left", "NONE": "right"}


class EmbedWire(CohereWire):
    name = "cohere-embed"

    def parse(self, state, request, body: bytes) -> Call:
        data = _read(self.endpoint, state, body, EMBED_FIELDS, ("model", "input_type"))
        pipe = state.pipeline
        for field in ("images", "inputs"):
            if data.get(field):
                raise _bad(f"invalid request: {field} are not supported: this server embeds "
                           "text; send texts", field)
        texts = data.get("texts")
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str)
                                                               for t in texts):
            raise _bad("invalid request: texts must be a non-empty list of strings", "texts")
        input_type = data["input_type"]
        if input_type not in INPUT_TYPES:
            raise _bad(f"invalid request: input_type must be one of {', '.join(INPUT_TYPES)} "
                       f"(this server embeds text), got {str(input_type)[:40]!r}", "input_type")
        types = data.get("embedding_types") or ["float"]
        if not isinstance(types, list) or not all(t in EMBEDDING_TYPES for t in types):
            raise _bad("invalid request: embedding_types must be a list of "
                       f"{', '.join(EMBEDDING_TYPES)}", "embedding_types")
        truncate = data.get("truncate") or "END"
        if truncate not in TRUNCATE:
            raise _bad("invalid request: truncate must be NONE, START or END", "truncate")
        dimensions = _count(data, "output_dimension")
        limit = _count(data, "max_tokens")
        _count(data, "priority", low=0)
        width = dimensions or pipe.dimension
        ranges = pipe.embedding_ranges(width) if any(t in RANGED for t in types) else None
        # a width past the model's is the pipeline's refusal (its dimensions rule), not this
        if any(t in RANGED for t in types) and ranges is None and width <= pipe.dimension:
            raise _bad(f"invalid request: {'/'.join(t for t in types if t in RANGED)} "
                       f"embeddings need int8 ranges calibrated for {width} dimensions, which "
                       "this export lacks (it predates them, or the model folder does not "
                       "declare that Matryoshka size); export the model again, or ask for "
                       "float or binary", "embedding_types")
        given = texts   # the answer lists the texts as sent
        if limit is not None and limit < pipe.max_length:
            texts = _first_tokens(pipe, texts, limit, last=truncate == "START")
        names = [n for n in INPUT_PROMPTS[input_type] if n in pipe.prompts]
        params = {"truncation_direction": TRUNCATE[truncate],
                  **({"prompt_name": names[0]} if names else {}),
                  **({} if dimensions is None else {"dimensions": dimensions})}
        if truncate == "NONE" and state.options.long_inputs == "chunk":
            params["long_inputs"] = "chunk"   # windowed into one vector instead of refused
            truncate = "CHUNK"
        return Call(Parsed(texts, False, params),
                    (truncate, list(dict.fromkeys(types)), given, ranges))

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        if call.context[0] == "NONE":
            prefix = pipe.prompt_text(prepared.params.get("prompt_name"), None)
            for i, e in enumerate(pipe.encode([prefix + t for t in prepared.read.records],
                                              warn=False)):
                if e.overflowing:
                    raise _bad(f"invalid request: text {i} is longer than the model's "
                               f"{pipe.max_length} tokens and truncate is NONE; shorten it, or "
                               "send truncate END or START", "texts")
        return work

    def respond(self, answer, call: Call, work):
        _, types, texts, ranges = call.context
        vectors = np.asarray(answer, dtype=np.float32)
        embeddings = {}
        for t in types:
            if t == "float":
                embeddings[t] = vectors.tolist()
            elif t == "base64":
                embeddings[t] = [base64_floats(v) for v in vectors]
            else:
                embeddings[t] = quantize(vectors, t, ranges if t in RANGED else None).tolist()
        body = {"id": str(uuid.uuid4()), "response_type": "embeddings_by_type",
                "embeddings": embeddings, "texts": texts,
                "meta": {"api_version": {"version": "2"},
                         "billed_units": {"input_tokens": work.tokens}}}
        return with_windows(Response(json.dumps(body).encode(), 200,
                                     media_type="application/json"), work)


RESPONSE = {"type": "object", "required": ["id", "results"], "properties": {
    "id": STRING, "meta": {"type": "object"},
    "results": {"type": "array", "description": "Best first.", "items": {
        "type": "object", "required": ["index", "relevance_score"],
        "properties": {"index": {"type": "integer", "minimum": 0},
                       "relevance_score": {"type": "number"}}}}}}
ERROR_SCHEMA = {"type": "object", "required": ["message"],
                "properties": {"id": STRING, "message": STRING}}
RERANK = Endpoint("POST", "/v2/rerank", "Documents ranked for a query (Cohere's v2 rerank).",
                  TAG, ("text-ranking", "multi-vector"), request_schema,
                  lambda state: {"model": state.name, "query": "What is Deep Learning?",
                                 "documents": ["Deep Learning is a kind of machine learning.",
                                               "Paris is in France."], "top_n": 1},
                  lambda state: RESPONSE,
                  {400: "A bad request.", 404: "Another model's name, or not a text-ranking "
                   "export.", **ANSWERS}, "CohereError")


def embed_schema(state) -> dict:
    return _body(state, ("input_type", "texts"), "texts", {
        "input_type": {"type": "string", "enum": list(INPUT_TYPES),
                       "description": "The model folder's prompt of that name, where it has "
                                      "one (search_query: query, search_document: document)."},
        "embedding_types": {"type": "array", "items": {"type": "string",
                                                       "enum": list(EMBEDDING_TYPES)},
                            "description": "Default [\"float\"]; int8/uint8 use the ranges "
                                           "calibrated at export."},
        "output_dimension": {**COUNT, "maximum": state.pipeline.dimension,
                             "description": "The first N values, renormalized."},
        "truncate": {"type": "string", "enum": list(TRUNCATE),
                     "description": "END (default) cuts a long text's end, START its start; "
                                    "NONE refuses it."},
        "max_tokens": {**COUNT, "description": "Cut each text to N tokens first."},
        "images": {"type": "array", "maxItems": 0, "description": "Not supported."},
        "inputs": {"type": "array", "maxItems": 0, "description": "Not supported."}})


_INTS = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
EMBED_RESPONSE = {"type": "object", "required": ["id", "embeddings"], "properties": {
    "id": STRING, "response_type": {"type": "string", "enum": ["embeddings_by_type"]},
    "texts": {"type": "array", "items": STRING}, "meta": {"type": "object"},
    "embeddings": {"type": "object", "description": "One list per embedding type asked for, "
                                                    "in the order of texts.", "properties": {
        "float": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "int8": _INTS, "uint8": _INTS, "binary": _INTS, "ubinary": _INTS,
        "base64": {"type": "array", "items": STRING,
                   "description": "Little-endian float32 bytes."}}}}}
EMBED = Endpoint("POST", "/v2/embed", "Sentence embeddings by type (Cohere's v2 embed).", TAG,
                 ("feature-extraction",), embed_schema,
                 lambda state: {"model": state.name, "input_type": "search_document",
                                "texts": ["Deep Learning is a kind of machine learning."],
                                "embedding_types": ["float", "ubinary"]},
                 lambda state: EMBED_RESPONSE,
                 {400: "A bad request, or int8/uint8 from an export without ranges.",
                  404: "Another model's name, or not a feature-extraction export.",
                  **ANSWERS}, "CohereError")
ENDPOINTS = (RERANK, EMBED)
WIRE = RerankWire(RERANK)
EMBED_WIRE = EmbedWire(EMBED)


def routes(h) -> list:
    async def rerank(request):
        return await h.infer(request, WIRE)

    async def embed(request):
        return await h.infer(request, EMBED_WIRE)

    return [Route("/v2/rerank", rerank, methods=["POST"]),
            Route("/v2/embed", embed, methods=["POST"])]
