"""Hugging Face text-embeddings-inference's HTTP API (TEI), on the exports of its tasks: what
TEI's clients send (huggingface_hub's `InferenceClient.feature_extraction`, LangChain's and
LlamaIndex's TEI embeddings, code written against TEI), answered in TEI's shapes.

    POST /embed         feature-extraction  {"inputs": str | [str], "normalize"?: true,
                                             "truncate"?, "truncation_direction"?,
                                             "prompt_name"?, "dimensions"?} -> [[float]]
    POST /tokenize      every export        {"inputs": str | [str], "add_special_tokens"?:
                                             true, "prompt_name"?} -> [[{"id", "text",
                                             "special", "start", "stop"}]]
    GET  /info          TEI's kinds         {"model_id", "model_dtype", "model_type", ...}

and /rerank, /embed_sparse (tei_retrieval.py), /predict, /similarity, /embed_all, /decode and
the base URL (tei_drop_in.py). TEI's defaults hold on its routes, whatever
the export's own: /embed answers unit vectors unless `normalize` is false. `dimensions` keeps a
vector's first N values (normalized after, as TEI does: Matryoshka models). Texts longer than
the model are truncated (TEI's --auto-truncate, on by default), at their end unless
`truncation_direction` is "Left" (the pipelines' truncation_direction: the tokenizers library
cuts, as in TEI); `truncate: false` refuses them instead. Token-id inputs are refused (the
pipelines read text).

Errors are TEI's `{"error", "error_type"}`: 422 `Validation` for a request the server will
not run (a bad field, a text past the model with truncate false, a request past a limit: the
inputs per request, --max-inputs, TEI's max_client_batch_size; the tokens, --max-tokens —
TEI answers 422 since its #818 of February 2026, 413 before), 400 `Empty` for an empty batch,
413 for a body past --max-body-bytes (TEI's payload limit), 503 `Unhealthy` while loading or
draining, and 404 `Backend` for a route of another kind of model. Reference: TEI's
router/src/http/types.rs and server.rs, core/src/tokenization.rs.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import metadata

import numpy as np
from starlette.responses import JSONResponse, Response

from ..core.tasks import DIRECTIONS, TASKS
from ..core.tensors import hidden_size
from .endpoints import Endpoint, check_served
from .protocol import Parsed, json_bytes
from .settings import flag
from .wire import Call, FieldError, Wire, with_windows

TAG = "Text Embeddings Inference"
# the exports /info describes as TEI's kinds of model: each answers that kind's TEI routes
# (a zero-shot export is not one: it needs candidate labels TEI's /predict cannot send)
# a BGE-M3 export is TEI's embedding model (its dense vector: CLS); a ColBERT one answers
# TEI's /rerank (by MaxSim) and not /embed, so to a TEI client it is a reranker
MODEL_TYPES = {"feature-extraction": "embedding", "sparse-embedding": "embedding",
               "bge-m3": "embedding", "text-ranking": "reranker",
               "multi-vector": "reranker", "text-classification": "classifier"}
# our kinds of refusal -> TEI's (status, error_type); any other client error is 422 validation
_REFUSALS = {"Empty": (400, "Empty"), "InvalidJson": (400, "Validation"),
             "PayloadTooLarge": (413, "Validation"), "Timeout": (408, "Validation"),
             "NotServed": (404, "Backend"), "ModelNotFound": (404, "Validation"),
             # TEI answers a bad key with an empty 401; ours carries its ErrorResponse (auth.py)
             "InvalidApiKey": (401, "Validation")}
_DTYPES = {"none": "float32", "fp16": "float16", "int8": "int8"}
_PRECISIONS = {"bf16": "bfloat16"}   # an engine's float arithmetic on an fp32 graph
# the pooling TEI names for a task whose export has none of its own (SPLADE's max over tokens)
_TASK_POOLING = {"sparse-embedding": "splade", "bge-m3": "cls"}
# the labels TEI names for a reranker without a classification head: MaxSim's one score, as a
# one-label cross-encoder's (the encoder's config.json may carry unused labels)
_TASK_LABELS = {"multi-vector": {0: "LABEL_0"}}
# TEI's names of the pooling modes where they differ from sentence-transformers'
_POOLING = {"lasttoken": "last_token"}


def error(status: int, message: str, kind: str, headers: dict | None = None,
          parameter: str | None = None):
    """TEI's ErrorResponse with TEI's status for its error type."""
    if kind in _REFUSALS:
        status, error_type = _REFUSALS[kind]
    elif status >= 500:
        error_type = "Unhealthy" if status == 503 else "Backend"
    elif status == 429:
        error_type = "Overloaded"
    else:
        status, error_type = 422, "Validation"
    return JSONResponse({"error": message, "error_type": error_type}, status, headers=headers)


def invalid(message: str, field: str | None = None) -> FieldError:
    return FieldError(422, message, field, "Validation")


# TEI's own words for its validation errors (core/src/lib.rs, TextEmbeddingsError::Validation)
VALIDATION = "Input validation error: "


# -- reading a request -----------------------------------------------------------------------

STRING = {"type": "string"}


def texts_schema(state, field: str = "inputs") -> dict:
    """The JSON schema of TEI's `inputs`: a text or a list of texts, within --max-inputs."""
    limit = state.options.limits.max_inputs
    return {"description": f"A text, or a list of at most {limit} texts (--max-inputs).",
            "anyOf": [STRING, {"type": "array", "items": STRING, "minItems": 1,
                               "maxItems": limit}]}


def object_schema(properties: dict, required: list[str]) -> dict:
    """The JSON schema of a TEI request body: these fields, no others (read_object's rule)."""
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def read_object(body: bytes, known: frozenset[str], required: tuple[str, ...]) -> dict:
    """The body as a JSON object holding only `known` fields and every `required` one."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise FieldError(400, f"the body is not valid JSON ({str(e)[:120]})", None,
                         "InvalidJson") from None
    if not isinstance(data, dict):
        raise invalid(f"the body must be a JSON object with {', '.join(map(repr, required))}")
    # `model`, on every route: which of the server's models answers (app.py picks it)
    extra = sorted(set(data) - known - {"model"})
    if extra:
        raise invalid(f"unknown field(s) {', '.join(map(repr, extra))}; this route reads "
                      f"{', '.join(sorted(known))}", extra[0])
    missing = [f for f in required if f not in data]
    if missing:
        raise invalid(f"missing field `{missing[0]}`", missing[0])
    return data


def read_texts(value, field: str, limit: int) -> list[str]:
    """A str or a list of str, as TEI's `Input`: an empty list is TEI's `empty` error, more
    than `limit` (--max-inputs) its batch size error; token ids are refused."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise invalid(f"`{field}` must be a string or a list of strings", field)
    if not value:
        raise FieldError(400, f"`{field}` cannot be empty", field, "Empty")
    if len(value) > limit:
        raise invalid(f"batch size {len(value)} > maximum allowed batch size {limit} "
                      f"({flag('max_inputs')} {limit}); split the request, or raise "
                      f"{flag('max_inputs')}", field)
    if all(isinstance(t, str) for t in value):
        return value
    if all(isinstance(t, int) or isinstance(t, list) for t in value):
        raise invalid(f"`{field}` holds token ids; this server reads text: send the texts as "
                      "strings", field)
    raise invalid(f"`{field}` must be a string or a list of strings", field)


def read_bool(data: dict, field: str, default: bool) -> bool:
    value = data.get(field, default)
    if not isinstance(value, bool):
        raise invalid(f"`{field}` must be true or false, got {json.dumps(value)[:40]}", field)
    return value


def read_truncation(data: dict) -> tuple[bool, dict]:
    """`truncate` (null: TEI's --auto-truncate, on) and `truncation_direction` ("Right" or
    "Left", TEI's names): whether long texts are cut, and the pipeline's parameter."""
    truncate = data.get("truncate")
    if truncate is not None and not isinstance(truncate, bool):
        raise invalid("`truncate` must be true, false or null", "truncate")
    direction = data.get("truncation_direction", "Right")
    if not isinstance(direction, str) or direction.lower() not in DIRECTIONS:
        raise invalid("`truncation_direction` must be \"Right\" or \"Left\"",
                      "truncation_direction")
    return truncate is not False, {"truncation_direction": direction.lower()}


def read_text_request(wire, state, body: bytes) -> tuple[dict, list[str], bool, dict]:
    """A TEI texts request (`{"inputs", "truncate"?, "truncation_direction"?, "prompt_name"?,
    ...}` of `wire.FIELDS`) to a model that serves the route: the body, its texts, whether
    long texts are cut, and the pipeline's truncation and prompt parameters."""
    check_served(wire.endpoint, state)
    data = read_object(body, wire.FIELDS, ("inputs",))
    texts = read_texts(data["inputs"], "inputs", state.options.limits.max_inputs)
    truncate, direction = read_truncation(data)
    return data, texts, truncate, {**read_prompt(data, state.pipeline), **direction}


def read_prompt(data: dict, pipe) -> dict:
    """`prompt_name` as the pipeline's parameter, where its task takes one (a null or absent
    name: the export's default prompt, as TEI's --default-prompt-name)."""
    name = data.get("prompt_name")
    if name is None:
        return {}
    if not isinstance(name, str):
        raise invalid("`prompt_name` must be a string or null", "prompt_name")
    if "prompt_name" not in TASKS[pipe.task].parameters:
        raise invalid(f"`prompt_name` {name!r}: this export has no prompts (its model folder "
                      "named none); leave prompt_name out", "prompt_name")
    return {"prompt_name": name}


def refuse_long(pipe, texts: list, pairs: list | None = None, limit: int | None = None,
                field: str = "inputs") -> None:
    """TEI's refusal of an input past the tokens the export keeps of a text when truncation is
    off: `limit`, by default `kept_tokens` (the model's length, BGE-M3's 512, a ColBERT's
    document length); `field` names the request's field in the message."""
    limit = pipe.kept_tokens if limit is None else limit
    # the priced encodings are read, not taken: the call that runs the request takes them
    over = pipe.overflowing(texts, pairs, limit)
    if over:
        i = over[0]
        whole = (texts[i],) if pairs is None or pairs[i] is None else (texts[i], pairs[i])
        n = len(pipe.tokenizer.backend.encode(*whole).ids)
        where = f" (input {i})" if field in ("inputs", "texts") else ""
        raise invalid(f"{VALIDATION}`{field}` must have less than {limit} tokens. "
                      f"Given: {n}{where}; shorten it, or send truncate true", field)


# -- the wires -------------------------------------------------------------------------------

class TeiWire(Wire):
    """A TEI route on the server's inference path: TEI's errors; `endpoint` names the route
    and the exports that serve it."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint

    def error(self, status, message, kind, headers=None, parameter=None):
        return error(status, message, kind, headers, parameter)


class EmbedWire(TeiWire):
    name = "tei-embed"
    FIELDS = frozenset({"inputs", "normalize", "truncate", "truncation_direction",
                        "prompt_name", "dimensions"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        pipe = state.pipeline
        data = read_object(body, self.FIELDS, ("inputs",))
        texts = read_texts(data["inputs"], "inputs", state.options.limits.max_inputs)
        normalize = read_bool(data, "normalize", True)
        truncate, direction = read_truncation(data)
        dimensions = data.get("dimensions")
        if dimensions is not None:
            width = hidden_size(pipe)
            if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
                raise invalid(VALIDATION + "`dimensions` should be positive", "dimensions")
            if dimensions > width:
                raise invalid(VALIDATION + "`dimensions` should be smaller than the maximum "
                              f"embedding dimension ({width})", "dimensions")
        # with dimensions the pipeline cuts the vector first and normalizes after (TEI's order)
        params = {"normalize": normalize, **read_prompt(data, pipe), **direction,
                  **({} if dimensions is None else {"dimensions": dimensions})}
        if not truncate and state.options.long_inputs == "chunk":
            params["long_inputs"] = "chunk"   # windowed into one vector instead of refused
            truncate = True
        return Call(Parsed(texts, False, params), truncate)

    def refuses_long(self, call: Call) -> bool:
        return not call.context   # truncate false

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        if self.refuses_long(call):
            prefix = prompt_text(pipe, prepared.params)
            refuse_long(pipe, [prefix + t for t in prepared.read.records])
        return work

    def respond(self, answer, call: Call, work):
        return with_windows(respond_json(answer), work)


@dataclass(frozen=True)
class _Tokenize:
    texts: list
    add_special_tokens: bool
    params: dict
    pipe: object


class TokenizeWire(TeiWire):
    """Answered without the model (`Call.parsed` None): the tokenizer's view of each text."""

    name = "tei-tokenize"
    FIELDS = frozenset({"inputs", "add_special_tokens", "prompt_name"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("inputs",))
        texts = read_texts(data["inputs"], "inputs", state.options.limits.max_inputs)
        special = read_bool(data, "add_special_tokens", True)
        params = read_prompt(data, state.pipeline)
        state.pipeline.check_parameters(**params)   # a prompt the model has (InputError: 422)
        return Call(None, _Tokenize(texts, special, params, state.pipeline))

    def respond(self, answer, call: Call, work):
        ctx: _Tokenize = call.context
        prefix = prompt_text(ctx.pipe, ctx.params)
        texts = [prefix + t for t in ctx.texts]
        encodings = ctx.pipe.tokenizer.backend.encode_batch(
            texts, add_special_tokens=ctx.add_special_tokens)
        return respond_json([simple_tokens(e, t) for e, t in zip(encodings, texts)])


def prompt_text(pipe, params: dict) -> str:
    """The text the pipeline puts before each input for `params`' prompt_name (the model's
    default prompt when none is named: FeatureExtractionPipeline.prompt_text); '' for a task
    without prompts."""
    if "prompt_name" not in TASKS[pipe.task].parameters:
        return ""
    return pipe.prompt_text(params.get("prompt_name"), None)


def simple_tokens(encoding, text: str) -> list[dict]:
    """TEI's SimpleToken of each token: a special token its own text and no offsets, the others
    the text they cover and its UTF-8 byte offsets (TEI's offsets are the Rust tokenizer's,
    in bytes; the Python binding gives characters)."""
    if text.isascii():
        to_byte = None
    else:
        to_byte = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in text])])
    out = []
    for id_, (start, stop), special, token in zip(encoding.ids, encoding.offsets,
                                                  encoding.special_tokens_mask, encoding.tokens):
        if special:
            out.append({"id": id_, "text": token, "special": True, "start": None, "stop": None})
            continue
        piece = text[start:stop]
        if to_byte is not None:
            start, stop = int(to_byte[start]), int(to_byte[stop])
        out.append({"id": id_, "text": piece, "special": False, "start": start, "stop": stop})
    return out


def respond_json(value) -> Response:
    """A 200 JSON answer (TEI's are bare arrays and objects)."""
    return Response(json_bytes(value), 200, media_type="application/json")


# -- GET /info -------------------------------------------------------------------------------

def model_dtype(pipe) -> str:
    """The numbers the model runs in: the export's quantization, else the engine's precision
    (OpenVINO at bf16 on an fp32 graph answers in bfloat16)."""
    dtype = _DTYPES.get(pipe.folder.manifest.quantization.get("mode"), "float32")
    config = getattr(getattr(pipe, "session", None), "config", None)
    if dtype == "float32" and config is not None:
        return _PRECISIONS.get(config.precision, dtype)
    return dtype


def info(state) -> dict:
    """TEI's Info object, filled from the export and the server's settings: what TEI's fields
    mean here is in docs/protocols.md."""
    pipe, options = state.pipeline, state.options
    manifest = pipe.folder.manifest
    kind = MODEL_TYPES[pipe.task]
    if kind == "embedding":
        pooling = _TASK_POOLING.get(pipe.task) or pipe.defaults.get("pooling")
        model_type = {"pooling": _POOLING.get(pooling, pooling)}
    else:
        labels = {str(i): name for i, name in
                  sorted(_TASK_LABELS.get(pipe.task, pipe.folder.id2label).items())}
        model_type = {"id2label": labels, "label2id": {v: int(k) for k, v in labels.items()}}
    try:
        version = metadata.version("bertonnx")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return {"model_id": manifest.source or str(pipe.folder.path), "model_sha": None,
            "model_dtype": model_dtype(pipe),
            "served_model_name": state.name, "model_type": {kind: model_type},
            "max_concurrent_requests": options.max_connections,
            "max_input_length": pipe.kept_tokens,
            "max_batch_tokens": options.batch.max_batch_size * pipe.max_length,
            "max_batch_requests": options.batch.max_batch_size,
            "max_client_batch_size": options.limits.max_inputs,
            "auto_truncate": True, "tokenization_workers": os.cpu_count() or 1,
            "version": version, "sha": None, "docker_label": None}
