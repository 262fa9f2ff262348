"""The rest of TEI's API, so that a client given only the server's base URL works as it would
against text-embeddings-inference: `huggingface_hub.InferenceClient(base_url=URL)` (how
LangChain and LlamaIndex configure TEI) posts every task to `/`, SageMaker to /invocations.
tei.py has TEI's errors, /embed, /tokenize and /info; tei_retrieval.py /rerank and
/embed_sparse.

    POST /predict     text-classification  {"inputs": str | [str, str] | [[str] | [str, str]],
                                            "truncate"?, "truncation_direction"?: "Right",
                                            "raw_scores"?: false} -> [{"score", "label"}] (a
                                            batch: one list per input): every label, best first
    POST /similarity  feature-extraction   {"inputs": {"source_sentence", "sentences"},
                                            "parameters"?: {"truncate", "truncation_direction",
                                            "prompt_name"}} -> [cosine] per sentence
    POST /embed_all   feature-extraction   {"inputs", "truncate"?, "truncation_direction"?,
                                            "prompt_name"?} -> [[[float]]]: per input, per token
    POST /decode      every export         {"ids": [int] | [[int]], "skip_special_tokens"?:
                                            true} -> [str]
    POST /, /invocations                   by the export's task, as TEI's router dispatches
                                            them (`base_wire`)

/predict keeps Hugging Face's convention (`{"inputs", "parameters"}` in, the pipeline's answer
out) and reads a body as TEI's only when it holds one of TEI's fields (truncate,
truncation_direction, raw_scores) and no "parameters": `{"inputs": ["a", "b"]}` stays two texts
there, where TEI reads a pair. On `/` a classifier's body without "parameters" is TEI's.
Deliberate differences: TEI's raw_scores false applies softmax (sigmoid for one label); here the
export's own function, which follows problem_type as transformers does; a classifier cuts long
texts at their end only ("Left" is refused, naming it). Reference: TEI's router/src/http/
server.rs (`predict`, `similarity`, `embed_all`, `decode`, the routes by ModelType) and types.rs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..core.tasks import TASKS
from .endpoints import check_served
from .protocol import Parsed
from .tei import (VALIDATION, TeiWire, error, invalid, prompt_text, read_bool, read_object,
                  read_prompt, read_text_request, read_texts, read_truncation, refuse_long,
                  respond_json)
from .wire import PREDICT, Call, FieldError, Wire

TEI_PREDICT_FIELDS = frozenset({"truncate", "truncation_direction", "raw_scores"})


def peek(body: bytes):
    """The body as JSON, or None when it is not (the chosen wire's parse then says why)."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


class Dispatch(Wire):
    """A route whose wire depends on the request: `choose(state, body as JSON)` picks it from
    the export's task and the body's shape; refusals are written as `errors` writes them."""

    def __init__(self, name: str, choose, errors: Wire):
        self.name, self.choose, self.errors = name, choose, errors

    def parse(self, state, request, body: bytes) -> Call:
        wire = self.choose(state, peek(body))
        call = wire.parse(state, request, body)
        return Call(call.parsed, (wire, call))

    def price(self, prepared, pipe, limits, call: Call):
        wire, inner = call.context
        return wire.price(prepared, pipe, limits, inner)

    def respond(self, answer, call: Call, work):
        wire, inner = call.context
        return wire.respond(answer, inner, work)

    def error(self, status, message, kind, headers=None, parameter=None):
        return self.errors.error(status, message, kind, headers, parameter)


# -- POST /predict, TEI's ----------------------------------------------------------------------

def read_sequences(value, limit: int) -> tuple[list[tuple[str, str | None]], bool]:
    """TEI's PredictInput: a text, a [text] or [text, pair], or a batch of those as lists;
    (text, pair or None) each, and whether it was one."""
    def sequence(item) -> tuple[str, str | None]:
        if not (isinstance(item, list) and 1 <= len(item) <= 2
                and all(isinstance(t, str) for t in item)):
            raise invalid("`inputs` must be a string, a pair of strings [string, string] or a "
                          "batch of mixed strings and pairs [[string], [string, string], ...]",
                          "inputs")
        return item[0], item[1] if len(item) == 2 else None

    if isinstance(value, str):
        return [(value, None)], True
    if isinstance(value, list) and value and not isinstance(value[0], list):
        return [sequence(value)], True
    if not isinstance(value, list) or not value:
        sequence(None)   # the refusal naming the shapes
    if len(value) > limit:
        raise invalid(f"batch size {len(value)} > maximum allowed batch size {limit} "
                      f"(--max-inputs {limit}); split the request", "inputs")
    return [sequence(item) for item in value], False


@dataclass(frozen=True)
class _Predict:
    single: bool
    truncate: bool
    texts: list
    pairs: list
    labels: dict      # label -> its index, for TEI's order of equal scores


class PredictWire(TeiWire):
    """TEI's /predict on a text-classification export: every label, best first."""

    name = "tei-predict"
    FIELDS = frozenset({"inputs"}) | TEI_PREDICT_FIELDS

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("inputs",))
        sequences, single = read_sequences(data["inputs"], state.options.limits.max_inputs)
        truncate, direction = read_truncation(data)
        if direction["truncation_direction"] != "right":
            raise invalid("`truncation_direction` \"Left\": a classifier here cuts long texts "
                          "at their end only; send \"Right\", or shorten the texts",
                          "truncation_direction")
        params = {"top_k": None}   # every label
        if read_bool(data, "raw_scores", False):
            params.update(TASKS[state.pipeline.task].raw_scores)
        texts, pairs = [t for t, _ in sequences], [p for _, p in sequences]
        inputs = [t if p is None else {"text": t, "text_pair": p} for t, p in sequences]
        labels = {name: i for i, name in reversed(list(enumerate(state.pipeline.labels)))}
        return Call(Parsed(inputs, False, params),
                    _Predict(single, truncate, texts, pairs, labels))

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        ctx: _Predict = call.context
        if not ctx.truncate:
            refuse_long(pipe, ctx.texts, ctx.pairs)
        return work

    def respond(self, answer, call: Call, work):
        ctx: _Predict = call.context
        # TEI sorts by score and reverses: equal scores come higher label index first
        ranked = [[{"score": r["score"], "label": r["label"]} for r in sorted(
            one, key=lambda r: (r["score"], ctx.labels.get(r["label"], 0)), reverse=True)]
            for one in answer]
        return respond_json(ranked[0] if ctx.single else ranked)


# -- POST /similarity, /embed_all ------------------------------------------------------------

@dataclass(frozen=True)
class _Texts:
    truncate: bool
    params: dict


def _refuse_long_texts(pipe, prepared, ctx: _Texts) -> None:
    if not ctx.truncate:
        prefix = prompt_text(pipe, ctx.params)
        refuse_long(pipe, [prefix + t for t in prepared.read.records])


class SimilarityWire(TeiWire):
    """TEI's sentence similarity: the cosine of each sentence's embedding with the source's."""

    name = "tei-similarity"
    FIELDS = frozenset({"inputs", "parameters"})
    PARAMETERS = frozenset({"truncate", "truncation_direction", "prompt_name"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("inputs",))
        inputs = data["inputs"]
        if not (isinstance(inputs, dict) and isinstance(inputs.get("source_sentence"), str)
                and isinstance(inputs.get("sentences"), list)
                and set(inputs) == {"source_sentence", "sentences"}):
            raise invalid("`inputs` must be {\"source_sentence\": string, \"sentences\": "
                          "[string, ...]}", "inputs")
        if not inputs["sentences"]:
            raise FieldError(400, "`inputs.sentences` cannot be empty", "inputs", "Empty")
        limit = state.options.limits.max_inputs
        sentences = read_texts(inputs["sentences"], "inputs.sentences", limit)
        if len(sentences) + 1 > limit:   # TEI counts the source sentence too
            raise invalid(f"batch size {len(sentences) + 1} > maximum allowed batch size "
                          f"{limit} (--max-inputs {limit}); split the request", "inputs")
        options = data.get("parameters") or {}
        if not isinstance(options, dict) or set(options) - self.PARAMETERS:
            raise invalid(f"`parameters` must be an object of {', '.join(sorted(self.PARAMETERS))}",
                          "parameters")
        truncate, direction = read_truncation(options)
        params = {"normalize": False, **read_prompt(options, state.pipeline), **direction}
        return Call(Parsed([inputs["source_sentence"], *sentences], False, params),
                    _Texts(truncate, params))

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        _refuse_long_texts(pipe, prepared, call.context)
        return work

    def respond(self, answer, call: Call, work):
        vectors = np.asarray(answer, dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1)
        norms[norms == 0] = 1.0   # a zero vector is similar to nothing (0), not NaN
        unit = vectors / norms[:, None]
        return respond_json((unit[1:] @ unit[0]).astype(float).tolist())


class EmbedAllWire(TeiWire):
    """TEI's /embed_all: each token's last hidden state (pooling "none"), per input."""

    name = "tei-embed-all"
    FIELDS = frozenset({"inputs", "truncate", "truncation_direction", "prompt_name"})

    def parse(self, state, request, body: bytes) -> Call:
        _, texts, truncate, params = read_text_request(self, state, body)
        params = {"pooling": "none", "normalize": False, **params}
        return Call(Parsed(texts, False, params), _Texts(truncate, params))

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        _refuse_long_texts(pipe, prepared, call.context)
        return work

    def respond(self, answer, call: Call, work):
        return respond_json([tokens[0] for tokens in answer])   # each is (1, T, H)


# -- POST /decode ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Decode:
    ids: list
    skip_special_tokens: bool
    pipe: object


class DecodeWire(TeiWire):
    """TEI's /decode, answered by the tokenizer without the model (`Call.parsed` None)."""

    name = "tei-decode"
    FIELDS = frozenset({"ids", "skip_special_tokens"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("ids",))
        ids, pipe = data["ids"], state.pipeline
        # TEI's InputIds: a list of ids ([] included) or a batch of them
        batch = isinstance(ids, list) and bool(ids) and all(isinstance(i, list) for i in ids)
        rows = ids if batch else [ids]
        limit = state.options.limits.max_inputs
        if len(rows) > limit:
            raise invalid(f"batch size {len(rows)} > maximum allowed batch size {limit} "
                          f"(--max-inputs {limit}); split the request", "ids")
        vocab = pipe.tokenizer.vocab_size
        for row in rows:
            if not isinstance(row, list) or not all(
                    isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab
                    for i in row):
                raise invalid(f"{VALIDATION}`ids` must be a list of token ids (integers from 0 "
                              f"to {vocab - 1}) or a list of such lists", "ids")
        return Call(None, _Decode(rows, read_bool(data, "skip_special_tokens", True), pipe))

    def respond(self, answer, call: Call, work):
        ctx: _Decode = call.context
        return respond_json([ctx.pipe.tokenizer.decode(row, ctx.skip_special_tokens)
                             for row in ctx.ids])


# -- the Hugging Face Inference API's convention on the base URL -----------------------------

class InferenceApiWire(Wire):
    """/predict's request on `/` (a body with "parameters": how InferenceClient sends
    text_classification, fill_mask, ...): the pipeline's answer, but for a classifier as the
    Inference API gives it — one list per input, a lone input's in a list too (huggingface_hub
    reads `[[...]]`), every label unless top_k says how many."""

    name = "inference-api"

    def parse(self, state, request, body: bytes) -> Call:
        parsed = PREDICT.parse(state, request, body).parsed
        classify = TASKS[state.pipeline.task].command == "classify"
        if classify and "top_k" not in parsed.params:
            parsed = Parsed(parsed.inputs, parsed.single, {**parsed.params, "top_k": None})
        return Call(parsed, classify and parsed.single)

    def respond(self, answer, call: Call, work):
        return PREDICT.respond([answer] if call.context else answer, call, work)

    def error(self, status, message, kind, headers=None, parameter=None):
        return error(status, message, kind, headers, parameter)   # TEI's: it answers on `/`
