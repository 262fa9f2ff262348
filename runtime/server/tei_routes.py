"""TEI's routes (tei.py, tei_retrieval.py and tei_drop_in.py speak them): each one's
`Endpoint` — the exports that serve it and its OpenAPI entry, TEI's request and response types
(router/src/http/types.rs) with the task record's parameters where they are the same — the
wire each route speaks (POST / and /invocations: by the export's task, as TEI's router), and
the Starlette routes on the app's handlers.
"""
from __future__ import annotations

from dataclasses import replace

from starlette.responses import JSONResponse
from starlette.routing import Route

from ..core.tasks import TASKS
from ..core.tensors import hidden_size
from .endpoints import Endpoint, not_served, param_schema
from .tei import (MODEL_TYPES, STRING, TAG, EmbedWire, TokenizeWire, error, info, object_schema,
                  texts_schema)
from .tei_drop_in import (TEI_PREDICT_FIELDS, DecodeWire, Dispatch, EmbedAllWire,
                          InferenceApiWire, PredictWire, SimilarityWire)
from .tei_retrieval import EmbedSparseWire, RerankWire
from . import multi_vector
from .bge_m3 import M3Output
from .wire import PREDICT, FieldError

NULL = {"type": "null"}
EXAMPLE = "What is Deep Learning?"


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
    return object_schema({
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
    return object_schema({
        "query": {**STRING, "description": "What the texts are ranked for."},
        "texts": {"type": "array", "items": STRING, "minItems": 1, "maxItems": limit,
                  "description": f"The texts to rank: at most {limit} (--max-inputs)."},
        "raw_scores": (param_schema(params["raw_scores"], state.pipeline, default=False)
                       if "raw_scores" in params else {"type": "boolean", "default": False,
                                                       "description": "No effect: MaxSim."}),
        "return_text": {"type": "boolean", "default": False,
                        "description": "Each result holds its text."},
        "truncate": TRUNCATE, "truncation_direction": DIRECTION}, ["query", "texts"])


def sparse_request(state) -> dict:
    return object_schema({"inputs": texts_schema(state), "truncate": TRUNCATE,
                    "truncation_direction": DIRECTION, **_prompt(state)}, ["inputs"])


def tokenize_request(state) -> dict:
    return object_schema({"inputs": texts_schema(state),
                    "add_special_tokens": {"type": "boolean", "default": True,
                                           "description": "Add the model's [CLS]/[SEP] (or "
                                                          "its family's) special tokens."},
                    **_prompt(state)}, ["inputs"])


SEQUENCE = {"type": "array", "items": STRING, "minItems": 1, "maxItems": 2,
            "description": "A text, or a text and its pair."}


def tei_predict_request(state) -> dict:
    """TEI's PredictRequest."""
    limit = state.options.limits.max_inputs
    return object_schema({
        "inputs": {"description": "A text, a [text, pair], or a batch of [text] and "
                                  f"[text, pair] lists (at most {limit}, --max-inputs).",
                   "anyOf": [STRING, SEQUENCE, {"type": "array", "items": SEQUENCE,
                                                "minItems": 1, "maxItems": limit}]},
        "truncate": TRUNCATE,
        "truncation_direction": {"type": "string", "enum": ["Right", "right"],
                                 "default": "Right", "description": "Long texts are cut at "
                                 "their end (Left is refused)."},
        "raw_scores": {"type": "boolean", "default": False,
                       "description": "The logits, without the export's activation."}},
        ["inputs"])


def similarity_request(state) -> dict:
    limit = state.options.limits.max_inputs
    return object_schema({
        "inputs": object_schema({
            "source_sentence": {**STRING, "description": "What the sentences are compared "
                                                         "with."},
            "sentences": {"type": "array", "items": STRING, "minItems": 1,
                          "maxItems": max(1, limit - 1),
                          "description": f"At most {limit} texts with the source "
                                         "(--max-inputs)."}},
            ["source_sentence", "sentences"]),
        "parameters": {"anyOf": [object_schema({"truncate": TRUNCATE,
                                          "truncation_direction": DIRECTION,
                                          **_prompt(state)}, []), NULL], "default": None}},
        ["inputs"])


def embed_all_request(state) -> dict:
    return object_schema({"inputs": texts_schema(state), "truncate": TRUNCATE,
                    "truncation_direction": DIRECTION, **_prompt(state)}, ["inputs"])


def decode_request(state) -> dict:
    vocab = state.pipeline.tokenizer.vocab_size
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": vocab - 1}}
    return object_schema({
        "ids": {"anyOf": [ids, {"type": "array", "items": ids, "minItems": 1,
                                "maxItems": state.options.limits.max_inputs}],
                "description": "Token ids, or a batch of lists of them."},
        "skip_special_tokens": {"type": "boolean", "default": True}}, ["ids"])


VECTORS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}},
           "description": "One vector per input, in input order."}
RANKS = {"type": "array", "description": "One per text, the highest score first.",
         "items": object_schema({"index": {"type": "integer", "minimum": 0},
                           "text": {**STRING, "description": "With return_text."},
                           "score": {"type": "number"}}, ["index", "score"])}
SPARSE = {"type": "array", "description": "Per input, its non-zero weights by index.",
          "items": {"type": "array", "items": object_schema({"index": {"type": "integer"},
                                                       "value": {"type": "number"}},
                                                      ["index", "value"])}}
OFFSET = {"anyOf": [{"type": "integer", "minimum": 0}, NULL]}
TOKENS = {"type": "array", "description": "Per input, its tokens in order.", "items": {
    "type": "array", "items": object_schema({
        "id": {"type": "integer"}, "text": STRING, "special": {"type": "boolean"},
        "start": {**OFFSET, "description": "UTF-8 byte offset in the (prompted) input; null "
                                           "for a special token"},
        "stop": OFFSET}, ["id", "text", "special", "start", "stop"])}}
INFO = object_schema({
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

PREDICTION = object_schema({"score": {"type": "number"}, "label": STRING}, ["score", "label"])
PREDICTIONS = {"type": "array", "items": PREDICTION, "description": "Every label, best first."}
PREDICT_ANSWER = {"anyOf": [PREDICTIONS, {"type": "array", "items": PREDICTIONS}],
                  "description": "A batch: one list per input."}
SIMILARITIES = {"type": "array", "items": {"type": "number"},
                "description": "The cosine of each sentence with the source sentence."}
TOKEN_VECTORS = {"type": "array", "description": "Per input, per token, its vector.",
                 "items": {"type": "array", "items": {"type": "array",
                                                      "items": {"type": "number"}}}}
DECODED = {"type": "array", "items": STRING, "description": "One text per list of ids."}

ERRORS = {413: "A body past --max-body-bytes.",
          422: "Input validation error: a bad field, an input past the model with truncate "
               "false, or past a limit (--max-inputs, --max-tokens), named in the message.",
          400: "An empty batch.", 503: "The model is loading, or the server is draining."}


def _example(body):
    return lambda state: body


EMBED = Endpoint("POST", "/embed", "Sentence embeddings (TEI's /embed).", TAG,
                 ("feature-extraction", "bge-m3"), embed_request, _example({"inputs": EXAMPLE}),
                 lambda state: VECTORS, {**ERRORS, 404: "Not an embedding export."},
                 "TeiError")
RERANK = Endpoint("POST", "/rerank", "Texts ranked for a query by a cross-encoder, or by MaxSim "
                  "on a ColBERT export (TEI's /rerank).", TAG, ("text-ranking", "multi-vector"),
                  rerank_request,
                  _example({"query": EXAMPLE, "texts": ["Deep Learning is a kind of machine "
                                                        "learning.", "Paris is in France."]}),
                  lambda state: RANKS, {**ERRORS, 404: "Not a text-ranking export."},
                  "TeiError")
EMBED_SPARSE = Endpoint("POST", "/embed_sparse", "Sparse SPLADE vectors (TEI's "
                        "/embed_sparse).", TAG, ("sparse-embedding", "bge-m3"), sparse_request,
                        _example({"inputs": EXAMPLE}), lambda state: SPARSE,
                        {**ERRORS, 404: "Not a sparse-embedding export."}, "TeiError")
TOKENIZE = Endpoint("POST", "/tokenize", "The tokens of each text (TEI's /tokenize).", TAG,
                    None, tokenize_request, _example({"inputs": EXAMPLE}),
                    lambda state: TOKENS, ERRORS, "TeiError")
INFO_ENDPOINT = Endpoint("GET", "/info", "The served model and the server's limits (TEI's "
                         "/info).", TAG, tuple(MODEL_TYPES), response=lambda state: INFO,
                         errors={503: "The model is loading."}, error_schema="TeiError")
TEI_PREDICT = Endpoint("POST", "/predict", "Every label, best first (TEI's /predict).", TAG,
                       ("text-classification",), tei_predict_request,
                       _example({"inputs": EXAMPLE, "raw_scores": False}),
                       lambda state: PREDICT_ANSWER, ERRORS, "TeiError")
SIMILARITY = Endpoint("POST", "/similarity", "The cosine of sentences with a source sentence "
                      "(TEI's /similarity).", TAG, ("feature-extraction",), similarity_request,
                      _example({"inputs": {"source_sentence": EXAMPLE,
                                           "sentences": ["What is Machine Learning?"]}}),
                      lambda state: SIMILARITIES, {**ERRORS, 404: "Not an embedding export."},
                      "TeiError")
EMBED_ALL = Endpoint("POST", "/embed_all", "Every token's vector (TEI's /embed_all).", TAG,
                     ("feature-extraction",), embed_all_request, _example({"inputs": EXAMPLE}),
                     lambda state: TOKEN_VECTORS, {**ERRORS, 404: "Not an embedding export."},
                     "TeiError")
DECODE = Endpoint("POST", "/decode", "The text of token ids (TEI's /decode).", TAG, None,
                  decode_request, _example({"ids": [[0]]}), lambda state: DECODED, ERRORS,
                  "TeiError")

# POST / and /invocations: the route TEI's router puts there for the export's kind
# (server.rs, by ModelType), a body with "parameters" the Inference API's convention
_KIND_SCHEMAS = {"feature-extraction": ((embed_request, VECTORS),
                                        (similarity_request, SIMILARITIES)),
                 "sparse-embedding": ((sparse_request, SPARSE),),
                 "text-ranking": ((rerank_request, RANKS),),
                 "text-classification": ((tei_predict_request, PREDICT_ANSWER),)}
_KIND_EXAMPLES = {"text-ranking": RERANK.example}


def base_request(state) -> dict:
    from . import openapi   # at call time: openapi imports auth, which imports this module

    own = [request(state) for request, _ in _KIND_SCHEMAS.get(state.pipeline.task, ())]
    predict = openapi.predict_request(state)
    return {"anyOf": [*own, predict]} if own else predict


def base_response(state) -> dict:
    from . import openapi   # at call time, as above

    own = [answer for _, answer in _KIND_SCHEMAS.get(state.pipeline.task, ())]
    return {"anyOf": [*own, openapi.ANSWER]} if own else openapi.ANSWER


def base_example(state):
    from . import openapi   # at call time, as above

    task = state.pipeline.task
    if task in _KIND_EXAMPLES:
        return _KIND_EXAMPLES[task](state)
    return {"inputs": EXAMPLE} if task in _KIND_SCHEMAS else openapi.predict_example(state)


def _base(path: str, summary: str) -> Endpoint:
    return Endpoint("POST", path, summary, TAG, None, base_request, base_example,
                    base_response, ERRORS, "TeiError")


BASE = _base("/", "The export's TEI route, by its kind (TEI's base URL): /embed, /similarity "
                  "(a body of {source_sentence, sentences}), /embed_sparse, /rerank or /predict; "
                  "a body with \"parameters\" or another task: /predict's answer.")
INVOCATIONS = _base("/invocations", "As POST / (SageMaker's route).")
ENDPOINTS = (EMBED, RERANK, EMBED_SPARSE, TOKENIZE, INFO_ENDPOINT, SIMILARITY, EMBED_ALL, DECODE,
             BASE, INVOCATIONS, multi_vector.EMBED_MULTI)
ERROR_SCHEMA = object_schema({"error": STRING, "error_type": {
    "type": "string", "enum": ["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer",
                               "Empty"]}}, ["error", "error_type"])

# the embedding routes also answer a BGE-M3 export, each with one of its outputs (bge_m3.py)
WIRES = {"/embed": M3Output(EmbedWire(EMBED), "dense_vecs"), "/rerank": RerankWire(RERANK),
         "/embed_sparse": M3Output(EmbedSparseWire(EMBED_SPARSE), "lexical_weights"),
         "/tokenize": TokenizeWire(TOKENIZE),
         "/similarity": SimilarityWire(SIMILARITY), "/embed_all": EmbedAllWire(EMBED_ALL),
         "/decode": DecodeWire(DECODE), "/embed_multi": M3Output(multi_vector.WIRE, "colbert_vecs")}
TEI_PREDICT_WIRE = PredictWire(TEI_PREDICT)
INFERENCE_API = InferenceApiWire()
INFO_WIRE = TokenizeWire(INFO_ENDPOINT)   # /info's refusals of a model name: TEI's
# task -> the TEI route POST / answers it with (as TEI's router does by the model's kind); what
# else branches on the task reads this table
_BY_KIND = {"feature-extraction": WIRES["/embed"], "sparse-embedding": WIRES["/embed_sparse"],
            "text-ranking": WIRES["/rerank"], "text-classification": TEI_PREDICT_WIRE}


def base_wire(state, data):
    """POST /'s wire for a body (`data`, None when it is not JSON)."""
    task, body = state.pipeline.task, data if isinstance(data, dict) else {}
    if _BY_KIND.get(task) is WIRES["/embed"] and isinstance(body.get("inputs"), dict):
        return WIRES["/similarity"]
    if "parameters" in body:
        return INFERENCE_API
    return _BY_KIND.get(task, INFERENCE_API)


def predict_wire(state, data):
    """/predict's wire: TEI's for a classifier's body with a TEI field and no "parameters"."""
    if (_BY_KIND.get(state.pipeline.task) is TEI_PREDICT_WIRE and isinstance(data, dict)
            and "parameters" not in data and TEI_PREDICT_FIELDS & data.keys()):
        return TEI_PREDICT_WIRE
    return PREDICT


BASE_ROUTE = Dispatch("tei-base", base_wire, WIRES["/embed"])   # TEI's errors
PREDICT_ROUTE = Dispatch("predict", predict_wire, PREDICT)       # /predict's errors


def with_tei_predict(endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    """`endpoints` with /predict's entry taking TEI's PredictRequest too, on a classifier."""
    def widen(e: Endpoint) -> Endpoint:
        if (e.method, e.path) != ("POST", "/predict"):
            return e

        def request(state):
            own = e.request(state)
            if _BY_KIND.get(state.pipeline.task) is not TEI_PREDICT_WIRE:
                return own
            tei = tei_predict_request(state)["properties"]
            inputs = {"anyOf": [own["properties"]["inputs"], tei.pop("inputs")]}
            return {**own, "properties": {**own["properties"], "inputs": inputs, **tei},
                    "description": "Hugging Face's convention; TEI's PredictRequest (its "
                                   "inputs and answer) when the body holds truncate, "
                                   "truncation_direction or raw_scores and no parameters."}

        def response(state):
            own = e.response(state)
            if _BY_KIND.get(state.pipeline.task) is not TEI_PREDICT_WIRE:
                return own
            return {"anyOf": [own, PREDICT_ANSWER]}

        return replace(e, request=request, response=response, errors={
            **e.errors, 422: "A classifier's TEI-shaped request TEI refuses: an input past "
                             "the model with truncate false, truncation_direction Left."})

    return tuple(widen(e) for e in endpoints)


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
        try:   # ?model=NAME, else the one model /info serves
            model = state.models.pick(request.query_params.get("model"), INFO_ENDPOINT.tasks,
                                      "/info", INFO_WIRE.unknown_model)
        except FieldError as e:
            return error(e.status, e.message, e.kind)
        if not INFO_ENDPOINT.serves(model.task):
            e = not_served(INFO_ENDPOINT, model.task, model.name if model.several else None)
            return error(e.status, e.message, e.kind)
        return JSONResponse(info(model))

    return [*(Route(path, inference(wire), methods=["POST"]) for path, wire in WIRES.items()),
            Route("/info", get_info, methods=["GET"]),
            *(Route(path, inference(BASE_ROUTE), methods=["POST"])
              for path in ("/", "/invocations"))]
