"""TEI's routes (tei.py speaks them): each one's `Endpoint` — the exports that serve it and its
OpenAPI entry, TEI's request and response types (router/src/http/types.rs) with the task
record's parameters where they are the same — and the Starlette routes on the app's handlers.
"""
from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.routing import Route

from ..core.tasks import TASKS
from ..core.tensors import hidden_size
from .endpoints import Endpoint, not_served, param_schema
from .tei import MODEL_TYPES, TAG, EmbedWire, TokenizeWire, error, info
from .tei_retrieval import EmbedSparseWire, RerankWire

STRING = {"type": "string"}
NULL = {"type": "null"}
EXAMPLE = "What is Deep Learning?"


def texts_schema(state, field: str = "inputs") -> dict:
    limit = state.options.limits.max_inputs
    return {"description": f"A text, or a list of at most {limit} texts (--max-inputs).",
            "anyOf": [STRING, {"type": "array", "items": STRING, "minItems": 1,
                               "maxItems": limit}]}


TRUNCATE = {"anyOf": [{"type": "boolean"}, NULL], "default": None,
            "description": "Cut texts longer than the model to its length (null: the server's "
                           "--auto-truncate, on); false refuses them with a 422."}
DIRECTION = {"type": "string", "enum": ["Right", "Left", "right", "left"], "default": "Right",
             "description": "Which end of a long text is cut: Right its end (where "
                            "sentence-transformers cuts), Left its start."}


def _prompt(state) -> dict:
    """prompt_name from the task record, where the export's task takes one."""
    param = TASKS[state.pipeline.task].parameters.get("prompt_name")
    if param is None:
        return {}
    return {"prompt_name": param_schema(param, state.pipeline, default=None)}


def embed_request(state) -> dict:
    pipe = state.pipeline
    normalize = param_schema(TASKS[pipe.task].parameters["normalize"], pipe, default=True)
    width = hidden_size(pipe)
    return _object({
        "inputs": texts_schema(state), "normalize": normalize, "truncate": TRUNCATE,
        "truncation_direction": DIRECTION, **_prompt(state),
        "dimensions": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": width}, NULL],
                       "default": None,
                       "description": "Keep the first N values of each vector (normalized "
                                      "after, when normalize is true): for Matryoshka models."}},
        ["inputs"])


def rerank_request(state) -> dict:
    params = TASKS[state.pipeline.task].parameters
    limit = state.options.limits.max_inputs
    return _object({
        "query": {**STRING, "description": "What the texts are ranked for."},
        "texts": {"type": "array", "items": STRING, "minItems": 1, "maxItems": limit,
                  "description": f"The texts to rank: at most {limit} (--max-inputs)."},
        "raw_scores": param_schema(params["raw_scores"], state.pipeline, default=False),
        "return_text": {"type": "boolean", "default": False,
                        "description": "Each result holds its text."},
        "truncate": TRUNCATE, "truncation_direction": DIRECTION}, ["query", "texts"])


def sparse_request(state) -> dict:
    return _object({"inputs": texts_schema(state), "truncate": TRUNCATE,
                    "truncation_direction": DIRECTION, **_prompt(state)}, ["inputs"])


def tokenize_request(state) -> dict:
    return _object({"inputs": texts_schema(state),
                    "add_special_tokens": {"type": "boolean", "default": True,
                                           "description": "Add the model's [CLS]/[SEP] (or "
                                                          "its family's) special tokens."},
                    **_prompt(state)}, ["inputs"])


def _object(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


VECTORS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}},
           "description": "One vector per input, in input order."}
RANKS = {"type": "array", "description": "One per text, the highest score first.",
         "items": _object({"index": {"type": "integer", "minimum": 0},
                           "text": {**STRING, "description": "With return_text."},
                           "score": {"type": "number"}}, ["index", "score"])}
SPARSE = {"type": "array", "description": "Per input, its non-zero weights by index.",
          "items": {"type": "array", "items": _object({"index": {"type": "integer"},
                                                       "value": {"type": "number"}},
                                                      ["index", "value"])}}
OFFSET = {"anyOf": [{"type": "integer", "minimum": 0}, NULL]}
TOKENS = {"type": "array", "description": "Per input, its tokens in order.", "items": {
    "type": "array", "items": _object({
        "id": {"type": "integer"}, "text": STRING, "special": {"type": "boolean"},
        "start": {**OFFSET, "description": "UTF-8 byte offset in the (prompted) input; null "
                                           "for a special token"},
        "stop": OFFSET}, ["id", "text", "special", "start", "stop"])}}
INFO = _object({
    "model_id": {**STRING, "description": "What the model was exported from."},
    "model_sha": {"anyOf": [STRING, NULL]},
    "model_dtype": {**STRING, "description": "float32, float16 or int8 (the export's)."},
    "served_model_name": STRING,
    "model_type": {"type": "object", "description": "embedding {pooling}, reranker or "
                   "classifier {id2label, label2id}"},
    "max_concurrent_requests": {"type": "integer", "description": "--max-connections"},
    "max_input_length": {"type": "integer", "description": "Tokens per input (the model's)."},
    "max_batch_tokens": {"type": "integer",
                         "description": "--max-batch-size × max_input_length"},
    "max_batch_requests": {"anyOf": [{"type": "integer"}, NULL],
                           "description": "--max-batch-size"},
    "max_client_batch_size": {"type": "integer", "description": "--max-inputs"},
    "auto_truncate": {"type": "boolean"}, "tokenization_workers": {"type": "integer"},
    "version": STRING, "sha": {"anyOf": [STRING, NULL]},
    "docker_label": {"anyOf": [STRING, NULL]}}, ["model_id", "model_dtype", "model_type"])

ERRORS = {413: "A body past --max-body-bytes.",
          422: "Input validation error: a bad field, an input past the model with truncate "
               "false, or past a limit (--max-inputs, --max-tokens), named in the message.",
          400: "An empty batch.", 503: "The model is loading, or the server is draining."}


def _example(body):
    return lambda state: body


EMBED = Endpoint("POST", "/embed", "Sentence embeddings (TEI's /embed).", TAG,
                 ("feature-extraction",), embed_request, _example({"inputs": EXAMPLE}),
                 lambda state: VECTORS, {**ERRORS, 404: "Not an embedding export."},
                 "TeiError")
RERANK = Endpoint("POST", "/rerank", "Texts ranked for a query by a cross-encoder (TEI's "
                  "/rerank).", TAG, ("text-ranking",), rerank_request,
                  _example({"query": EXAMPLE, "texts": ["Deep Learning is a kind of machine "
                                                        "learning.", "Paris is in France."]}),
                  lambda state: RANKS, {**ERRORS, 404: "Not a text-ranking export."},
                  "TeiError")
EMBED_SPARSE = Endpoint("POST", "/embed_sparse", "Sparse SPLADE vectors (TEI's "
                        "/embed_sparse).", TAG, ("sparse-embedding",), sparse_request,
                        _example({"inputs": EXAMPLE}), lambda state: SPARSE,
                        {**ERRORS, 404: "Not a sparse-embedding export."}, "TeiError")
TOKENIZE = Endpoint("POST", "/tokenize", "The tokens of each text (TEI's /tokenize).", TAG,
                    None, tokenize_request, _example({"inputs": EXAMPLE}),
                    lambda state: TOKENS, ERRORS, "TeiError")
INFO_ENDPOINT = Endpoint("GET", "/info", "The served model and the server's limits (TEI's "
                         "/info).", TAG, tuple(MODEL_TYPES), response=lambda state: INFO,
                         errors={503: "The model is loading."}, error_schema="TeiError")
ENDPOINTS = (EMBED, RERANK, EMBED_SPARSE, TOKENIZE, INFO_ENDPOINT)
ERROR_SCHEMA = _object({"error": STRING, "error_type": {
    "type": "string", "enum": ["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer",
                               "Empty"]}}, ["error", "error_type"])

WIRES = {"/embed": EmbedWire(EMBED), "/rerank": RerankWire(RERANK),
         "/embed_sparse": EmbedSparseWire(EMBED_SPARSE), "/tokenize": TokenizeWire(TOKENIZE)}


def routes(h) -> list:
    """TEI's routes on the app's handlers `h` (app._Handlers)."""
    state = h.state

    def inference(wire):
        async def endpoint(request):
            return await h.infer(request, wire)
        return endpoint

    async def get_info(request):
        if not state.ready or state.draining:
            return error(503, "the model is still loading; retry shortly" if not state.ready
                         else "the server is shutting down", "NotReady", {"Retry-After": "1"})
        if not INFO_ENDPOINT.serves(state.pipeline.task):
            e = not_served(INFO_ENDPOINT, state.pipeline.task)
            return error(e.status, e.message, e.kind)
        return JSONResponse(info(state))

    return [*(Route(path, inference(wire), methods=["POST"]) for path, wire in WIRES.items()),
            Route("/info", get_info, methods=["GET"])]
