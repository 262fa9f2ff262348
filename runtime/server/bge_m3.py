"""The embedding routes on a BGE-M3 export (the bge-m3 task): each route answers one of its three
outputs, in the route's own shape, from the one pipeline (pipelines/bge_m3.py):

    POST /embed, /v1/embeddings   dense_vecs        (TEI's and OpenAI's vectors)
    POST /embed_sparse            lexical_weights   (TEI's [{index, value}], by index)
    POST /embed_multi             colbert_vecs      (nested floats or base64 float32)

`M3Output` wraps the route's own wire: the wire reads the request as it always does (its fields,
limits and errors), then the parameters that mean something to BGE-M3 are kept (`normalize`),
and the call asks the pipeline for that one output only; the answer goes back through the wire's
own `respond`. What BGE-M3 does not do is refused in one line naming the field: a prompt, a
`dimensions` cut, truncation on the left (FlagEmbedding cuts texts on the right, at 512 tokens
by default, as `BGEM3FlagModel.encode` does; `truncate: false` refuses a text past that cut, as
TEI refuses one past the model, and /info's max_input_length is the cut). `is_query` is read
and has no effect: BGE-M3 encodes queries as it encodes documents. Another export on the same
route is the wire's alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .protocol import Parsed
from .tei import refuse_long
from .wire import Call, FieldError, Wire

TASK = "bge-m3"
# the wire's parameters BGE-M3 reads (or accepts with no effect: is_query), by name
KEPT = frozenset({"normalize"})
HARMLESS = {"is_query": None, "truncation_direction": "right"}


class M3Output(Wire):
    """`inner` (the route's wire) answering a bge-m3 export with its `output` ("dense_vecs",
    "lexical_weights" or "colbert_vecs")."""

    def __init__(self, inner: Wire, output: str):
        self.inner, self.output = inner, output
        self.name = inner.name
        self.endpoint = inner.endpoint

    @property
    def tasks(self):
        return self.inner.tasks

    def model_of(self, request, body: bytes):
        return self.inner.model_of(request, body)

    def unknown_model(self, name, names):
        return self.inner.unknown_model(name, names)

    def parse(self, state, request, body: bytes) -> Call:
        call = self.inner.parse(state, request, body)
        if state.pipeline.task != TASK:
            return call
        # truncate false, as the wire read it; with --long-inputs chunk the wire windows such a
        # text instead (long_inputs), which BGE-M3 does not: refused past the cut too
        refuse = self.inner.refuses_long(call) or "long_inputs" in call.parsed.params
        params = {}
        for name, value in call.parsed.params.items():
            if name == "long_inputs":
                continue
            if name in KEPT:
                params[name] = value
            elif name in HARMLESS:
                if HARMLESS[name] is not None and value != HARMLESS[name]:
                    raise FieldError(422, f"`{name}` {value!r}: a BGE-M3 export cuts long texts "
                                     f"on the {HARMLESS[name]}, as FlagEmbedding does; leave "
                                     f"{name} out", name, "Validation")
            else:
                raise FieldError(422, f"`{name}` does not apply to a BGE-M3 export (it "
                                 "answers FlagEmbedding's outputs as they are); leave it out",
                                 name, "Validation")
        wanted = {"return_dense": self.output == "dense_vecs",
                  "return_sparse": self.output == "lexical_weights",
                  "return_colbert_vecs": self.output == "colbert_vecs"}
        parsed = call.parsed
        return Call(Parsed(parsed.inputs, parsed.single, {**params, **wanted}),
                    _Answered(call.context, refuse))

    def price(self, prepared, pipe, limits, call: Call):
        if pipe.task != TASK:
            return self.inner.price(prepared, pipe, limits, call)
        work = prepared.price(pipe, limits)
        if call.context.refuse_long:   # truncate false: past the cut is refused, not cut
            refuse_long(pipe, list(prepared.read.records))
        return work

    def respond(self, answer, call: Call, work):
        if isinstance(call.context, _Answered):   # one output of each text's dict
            answer = [_plain(r[self.output]) for r in answer]
            call = Call(call.parsed, call.context.inner)
        return self.inner.respond(answer, call, work)

    def error(self, status, message, kind, headers=None, parameter=None):
        return self.inner.error(status, message, kind, headers, parameter)


@dataclass(frozen=True)
class _Answered:
    """A call M3Output made of the wire's: the wire's own context inside, and whether a text
    past the cut is refused (truncate false)."""

    inner: Any
    refuse_long: bool = False


def _plain(value):
    """A dense vector as the list the feature-extraction routes answer; others as they are."""
    return value.tolist() if isinstance(value, np.ndarray) and value.ndim == 1 else value
