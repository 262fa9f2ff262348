"""text-ranking: a cross-encoder's reranking, sentence-transformers' CrossEncoder.rank on
onnxruntime.

    rerank = load("out/reranker")
    rerank("who wrote it?", ["a novel by Harper Lee", "a film"], top_k=1, return_documents=True)
    # [{"corpus_id": 0, "score": 0.93, "text": "a novel by Harper Lee"}]

Each (query, document) pair is one sequence-classifier input, tokenized as a pair and truncated
longest-first to the model's length (CrossEncoder's tokenizer call: truncation="longest_first",
its max_length being the tokenizer's model_max_length capped at the position table). The score
is the one logit through the folder's activation (CrossEncoder's activation_fn: Sigmoid unless
the folder names another, recorded at export in the manifest's defaults); raw_scores=True gives
the logit. Results are CrossEncoder.rank's: {"corpus_id", "score", ("text")} sorted by score,
best first (ties in document order), the best top_k. A model of several labels is refused, as
CrossEncoder.rank refuses it.

Inputs: (query, documents) positionally or as query=/documents=, a {"query", "documents"} dict,
or a list of those (one ranked list per query). A prompt goes before each query (`prompt`,
`prompt_name`, else the CrossEncoder folder's default prompt: CrossEncoder.rank and predict
prompt the first text of each pair). Deliberate differences: an empty query or
document is refused (CrossEncoder scores it), and scores are floats, not numpy float32.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..cross_encoder import label_count, read_cross_encoder
from ..errors import ConfigError, InputError
from ..postprocess import sigmoid
from ..tensors import BYTES, FP32, N, TaskTensors, Tensor
from .base import Work
from .inputs import Inputs, RankInput, check_text, row_field
from .sentence_folder import SentenceFolderPipeline

# text-ranking's activation_fn (tasks.py ACTIVATIONS) -> the function on float32 logits
ACTIVATE = {"sigmoid": sigmoid, "identity": lambda x: x, "tanh": np.tanh}


def _from_tensors(tensors: dict, pipe) -> list:
    """/v2: each row one (query, document) pair, ranked alone."""
    return [{"query": q, "documents": [d]} for q, d in zip(tensors["query"],
                                                            tensors["document"])]


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"score": np.array([r[0]["score"] for r in results], dtype=np.float32)}


class TextRankingPipeline(SentenceFolderPipeline):
    task = "text-ranking"
    # a row is a pair and its score: a ranked list per query would make rows ragged
    tensors = TaskTensors(task, (Tensor("query", BYTES, N), Tensor("document", BYTES, N)),
                          (Tensor("score", FP32, N),), _from_tensors, _to_tensors)
    input_keywords = ("query", "documents")
    input_hint = ('{"query": "...", "documents": ["...", ...]} or a list of such objects')
    row_fields = RankInput._fields

    @classmethod
    def check_model(cls, config: Mapping, where: str) -> None:
        n = label_count(config)
        if n != 1:
            raise ConfigError(f"{where} has {n} labels; reranking needs one score per "
                              "(query, document) pair (sentence-transformers' CrossEncoder.rank "
                              "refuses such models too)",
                              "export it with --task text-classification (a score per label "
                              "for each pair) or --task zero-shot-classification (an NLI model)")

    @classmethod
    def folder_defaults(cls, path: Path) -> dict:
        """A CrossEncoder folder's activation (none for a plain classifier: Sigmoid, as
        CrossEncoder's default for one label)."""
        ce = read_cross_encoder(path)
        if ce is None:
            return {}
        if ce.activation == "softmax":   # over one label: always 1.0, so never meant
            raise ConfigError(f"{path}: a CrossEncoder of one label with a Softmax activation "
                              "scores every pair 1.0", "set its activation_fn to Sigmoid")
        return {"activation_fn": ce.activation}

    # -- inputs --------------------------------------------------------------------------

    @classmethod
    def read_inputs(cls, *args, query=None, documents=None) -> Inputs:
        """(query, documents), query=/documents=, a {"query", "documents"} dict or a list of
        them -> one RankInput per query."""
        if len(args) == 1 and isinstance(args[0], Inputs) and query is documents is None:
            return args[0]
        if args and (query is not None or documents is not None):
            raise InputError("pass the inputs either positionally or as query=/documents=",
                             "not both")
        if len(args) == 2:
            query, documents = args
        elif len(args) == 1:
            items, single = args[0], isinstance(args[0], dict)
            items = [items] if single else items
            if not isinstance(items, (list, tuple)):
                raise InputError(f"cannot rank from a {type(args[0]).__name__}",
                                 'pass (query, documents), {"query": ..., "documents": [...]} '
                                 "or a list of such objects")
            records = []
            for i, it in enumerate(items):
                if not isinstance(it, dict) or set(it) != set(RankInput._fields):
                    raise InputError(f"input #{i} is not a {{query, documents}} object",
                                     'pass {"query": ..., "documents": [...]}', index=i)
                records.append(cls._record(it["query"], it["documents"],
                                           "" if single else f" of input #{i}", i))
            return Inputs(tuple(records), single, "dict" if single else "list")
        elif args:
            raise InputError("cannot understand the positional arguments",
                             "pass (query, documents)")
        if query is None or documents is None:
            raise InputError("both a query and documents are needed",
                             "pass (query, documents) or query=... and documents=[...]")
        return Inputs((cls._record(query, documents, "", 0),), True, "dict")

    @staticmethod
    def _record(query, documents, where: str, index: int) -> RankInput:
        check_text(query, f"the query{where}", index=index)
        if isinstance(documents, str) or not isinstance(documents, (list, tuple)):
            raise InputError(f"the documents{where} are a {type(documents).__name__}, not a "
                             "list of strings", "pass a list of texts (JSONL or Parquet rows; "
                             "a CSV cell holds one text)", index=index)
        for j, d in enumerate(documents):
            check_text(d, f"document #{j}{where}", index=index)
        return RankInput(query, tuple(documents))

    @classmethod
    def is_json_input(cls, x, in_list: bool = False) -> bool:
        return (isinstance(x, dict) and set(x) == set(RankInput._fields)
                and isinstance(x["query"], str) and isinstance(x["documents"], list)
                and all(isinstance(d, str) for d in x["documents"]))

    counted = "documents"

    @classmethod
    def count(cls, inputs: Inputs) -> int:
        """Every query's documents (one model input each): what the server's --max-inputs
        bounds."""
        return sum(len(r.documents) for r in inputs.records)

    @classmethod
    def input_of_row(cls, row) -> dict:
        return {name: row_field(row, name) for name in cls.row_fields}

    # -- running -------------------------------------------------------------------------

    def _pairs(self, read: Inputs, prompt: str) -> tuple[list[str], list[str]]:
        """Every (query, document) pair, the prompt before each query, queries in order, each
        one's documents in order."""
        return ([prompt + r.query for r in read.records for _ in r.documents],
                [d for r in read.records for d in r.documents])

    def estimate(self, inputs: Inputs, **params) -> Work:
        queries, docs = self._pairs(inputs, self.prompt_text(params["prompt_name"],
                                                             params["prompt"]))
        return Work(sum(len(e.ids) for e in self.encode(queries, docs, warn=False)))

    def predict(self, read: Inputs, top_k, return_documents, raw_scores, activation_fn,
                prompt_name, prompt, truncation_direction, batch_size):
        queries, docs = self._pairs(read, self.prompt_text(prompt_name, prompt))
        encs = self.encode(queries, docs, direction=truncation_direction.lower()) if docs else []
        logits = np.asarray(self.infer(encs, lambda batch, out: out["logits"][:, 0],
                                       batch_size), dtype=np.float32)
        scores = logits if raw_scores else ACTIVATE[activation_fn](logits)
        results, start = [], 0
        for r in read.records:
            own = scores[start:start + len(r.documents)].tolist()
            start += len(r.documents)
            ranked = [{"corpus_id": i, "score": s, **({"text": d} if return_documents else {})}
                      for i, (s, d) in enumerate(zip(own, r.documents))]
            # sorted() is stable: equal scores keep document order, as CrossEncoder.rank's
            ranked.sort(key=lambda x: x["score"], reverse=True)
            results.append(ranked[:top_k])
        return self.unwrap(results, read)
