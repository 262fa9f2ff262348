"""Cohere's rerank API (v2) on a text-ranking export: what the `cohere` package's
`ClientV2(base_url=...).rerank(...)` and the frameworks built on it (LangChain's
CohereRerank, LlamaIndex's CohereRerank) send.

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
"""
from __future__ import annotations

import json
import uuid

from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .endpoints import Endpoint, check_served
from .protocol import Parsed
from .wire import Call, FieldError, Wire, served

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


class RerankWire(Wire):
    name = "cohere-rerank"

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint

    def unknown_model(self, name, names):
        return _bad(f"model {str(name)[:80]!r} not found: this server serves {served(names)}",
                    "model", 404, "ModelNotFound")

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise _bad(f"invalid request: the body is not valid JSON ({str(e)[:120]})") from None
        if not isinstance(data, dict):
            raise _bad('invalid request: the body must be a JSON object {"model", "query", '
                       '"documents"}')
        extra = sorted(set(data) - FIELDS)
        if extra:
            raise _bad(f"invalid request: unknown field(s) {', '.join(extra)}", extra[0])
        for field in ("model", "query", "documents"):
            if field not in data:
                raise _bad(f"invalid request: {field} is required", field)
        if data["model"] != state.name:
            raise _bad(f"model {str(data['model'])[:80]!r} not found: this server serves "
                       f"{state.name!r}", "model", 404, "ModelNotFound")
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

    def error(self, status, message, kind, headers=None, parameter=None):
        return error(status, message, kind, headers, parameter)


def _first_tokens(pipe, documents: list[str], limit: int) -> list[str]:
    """Each document cut after its first `limit` tokens (special tokens not counted)."""
    encodings = pipe.tokenizer.backend.encode_batch(documents, add_special_tokens=False)
    return [d if len(e.ids) <= limit else d[:e.offsets[limit - 1][1]]
            for d, e in zip(documents, encodings)]


def request_schema(state) -> dict:
    limit = state.options.limits.max_inputs
    count = {"type": "integer", "minimum": 1}
    return {"type": "object", "required": ["model", "query", "documents"],
            "additionalProperties": False, "properties": {
                "model": {"type": "string", "enum": [state.name]},
                "query": STRING,
                "documents": {"type": "array", "items": STRING, "minItems": 1,
                              "maxItems": limit,
                              "description": f"At most {limit} (--max-inputs)."},
                "top_n": {**count, "description": "The best N (default: all)."},
                "max_tokens_per_doc": {**count, "description": "Cut each document to its "
                                                               "first N tokens."},
                "priority": {"type": "integer", "minimum": 0,
                             "description": "Accepted, ignored (one queue)."},
                "relevant_spans": {"type": "object", "description": "Not supported: "
                                   "\"enabled\" is refused."}}}


RESPONSE = {"type": "object", "required": ["id", "results"], "properties": {
    "id": STRING, "meta": {"type": "object"},
    "results": {"type": "array", "description": "Best first.", "items": {
        "type": "object", "required": ["index", "relevance_score"],
        "properties": {"index": {"type": "integer", "minimum": 0},
                       "relevance_score": {"type": "number"}}}}}}
ERROR_SCHEMA = {"type": "object", "required": ["message"],
                "properties": {"id": STRING, "message": STRING}}
RERANK = Endpoint("POST", "/v2/rerank", "Documents ranked for a query (Cohere's v2 rerank).",
                  TAG, ("text-ranking",), request_schema,
                  lambda state: {"model": state.name, "query": "What is Deep Learning?",
                                 "documents": ["Deep Learning is a kind of machine learning.",
                                               "Paris is in France."], "top_n": 1},
                  lambda state: RESPONSE,
                  {400: "A bad request.", 404: "Another model's name, or not a text-ranking "
                   "export.", 413: "A body past --max-body-bytes.",
                   422: "Past a limit (--max-inputs, --max-tokens), named.",
                   503: "The model is loading, or the server is draining."}, "CohereError")
ENDPOINTS = (RERANK,)
WIRE = RerankWire(RERANK)


def routes(h) -> list:
    async def rerank(request):
        return await h.infer(request, WIRE)

    return [Route("/v2/rerank", rerank, methods=["POST"])]
