"""TEI's /rerank and /embed_sparse (tei.py has the rest of TEI's API and its errors):

    POST /rerank        text-ranking      {"query", "texts": [str], "raw_scores"?: false,
                                           "return_text"?: false, "truncate"?,
                                           "truncation_direction"?} -> [{"index", "text"?,
                                           "score"}], highest score first
    POST /embed_sparse  sparse-embedding  {"inputs": str | [str], "truncate"?,
                                           "truncation_direction"?, "prompt_name"?}
                                           -> [[{"index", "value"}]], by index

A rerank's scores are the cross-encoder's (pipelines/text_ranking.py): its activation, sigmoid
for one label (as TEI's), the logits with `raw_scores`; on a multi-vector (ColBERT) export, the
MaxSim of the query's and each text's token vectors (PyLate's colbert_scores), the query and
texts cut at the folder's query and document lengths (`truncate: false` refuses past them, and
/info's max_input_length is the document length); equal scores come out as TEI orders them
(the higher index first). Each of `texts` counts against --max-inputs (TEI's
max_client_batch_size bounds them the same way). A sparse vector is each text's non-zero SPLADE
weights (pipelines/sparse_embedding.py), listed by vocabulary index as TEI lists them.
Reference: TEI's router/src/http/server.rs (`rerank`, `embed_sparse`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .endpoints import check_served
from .protocol import Parsed
from .tei import (TeiWire, invalid, prompt_text, read_bool, read_object,
                  read_text_request, read_texts, read_truncation, refuse_long, respond_json)
from .wire import Call

# the task whose exports /rerank also serves, by MaxSim over token vectors (ColBERT)
MULTI_VECTOR = "multi-vector"


@dataclass(frozen=True)
class _Rerank:
    query: str
    texts: list
    truncate: bool
    return_text: bool


class RerankWire(TeiWire):
    name = "tei-rerank"
    FIELDS = frozenset({"query", "texts", "truncate", "truncation_direction", "raw_scores",
                        "return_text"})

    def parse(self, state, request, body: bytes) -> Call:
        check_served(self.endpoint, state)
        data = read_object(body, self.FIELDS, ("query", "texts"))
        query = data["query"]
        if not isinstance(query, str):
            raise invalid("`query` must be a string", "query")
        if not isinstance(data["texts"], list):
            raise invalid("`texts` must be a list of strings", "texts")
        texts = read_texts(data["texts"], "texts", state.options.limits.max_inputs)
        truncate, direction = read_truncation(data)
        params = {"raw_scores": read_bool(data, "raw_scores", False), **direction}
        if state.pipeline.task == MULTI_VECTOR:
            # MaxSim (pipelines/multi_vector.py): no activation to leave out, and texts cut
            # where PyLate cuts them (the query and document lengths) or, with truncate
            # false, refused past them
            params = {}
        ctx = _Rerank(query, texts, truncate, read_bool(data, "return_text", False))
        return Call(Parsed({"query": query, "documents": texts}, True, params), ctx)

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        ctx: _Rerank = call.context
        if ctx.truncate:
            return work
        if pipe.task == MULTI_VECTOR:   # the query and each text at their own lengths
            refuse_long(pipe, pipe.prompted([ctx.query], True), limit=pipe.cut(True),
                        field="query")
            refuse_long(pipe, pipe.prompted(ctx.texts, False), limit=pipe.cut(False),
                        field="texts")
        else:   # the query as the model reads it: after the default prompt
            refuse_long(pipe, [prompt_text(pipe, {}) + ctx.query] * len(ctx.texts), ctx.texts)
        return work

    def respond(self, answer, call: Call, work):
        ctx: _Rerank = call.context
        ranks = [{"index": r["corpus_id"],
                  **({"text": ctx.texts[r["corpus_id"]]} if ctx.return_text else {}),
                  "score": r["score"]} for r in sorted(answer, key=lambda r: r["corpus_id"])]
        # TEI sorts by score, then reverses: equal scores come higher index first
        ranks.sort(key=lambda r: r["score"])
        return respond_json(ranks[::-1])


class EmbedSparseWire(TeiWire):
    name = "tei-embed-sparse"
    FIELDS = frozenset({"inputs", "truncate", "truncation_direction", "prompt_name"})

    def parse(self, state, request, body: bytes) -> Call:
        _, texts, truncate, params = read_text_request(self, state, body)
        return Call(Parsed(texts, False, params), (truncate, params))

    def refuses_long(self, call: Call) -> bool:
        return not call.context[0]   # truncate false

    def price(self, prepared, pipe, limits, call: Call):
        work = super().price(prepared, pipe, limits, call)
        if self.refuses_long(call):
            prefix = prompt_text(pipe, call.context[1])
            refuse_long(pipe, [prefix + t for t in prepared.read.records])
        return work

    def respond(self, answer, call: Call, work):
        return respond_json([sorted(({"index": e["index"], "value": e["value"]} for e in vector),
                                    key=lambda e: e["index"]) for vector in answer])
