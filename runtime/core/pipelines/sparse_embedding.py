"""sparse-embedding: SPLADE vectors on onnxruntime, as sentence-transformers' SparseEncoder makes
them.

The graph pools (build/heads.py `SpladeHead`: log1p(relu(MLM logits)) over each text's unpadded
tokens, max or sum as the model folder's SpladePooling says) and answers one weight per
vocabulary id, (B, V). This pipeline keeps each text's non-zero weights, heaviest first:

    [{"index": 2054, "value": 1.93}, {"index": 2003, "value": 1.41}, ...]     one list per text

— TEI's /embed_sparse names (router/src/http/types.rs `SparseValue`) in the order of
`SparseEncoder.decode` (weight descending; equal weights by index). `top_k` keeps the k heaviest
(decode's `top_k`; encode's `max_active_dims` keeps the same ones, the weights being ≥ 0);
`return_tokens` adds each id's vocabulary token ("token", what decode pairs the weight with).
Texts longer than the model are truncated with a warning, where SparseEncoder truncates them (a
SparseEncoder folder's max_seq_length), and a prompt goes before each text as SparseEncoder.encode
puts it (`prompt`, `prompt_name`, else the folder's default prompt: sentence_folder.py).

Memory: the (B·T, V) MLM logits exist only inside onnxruntime, for one micro-batch at a time,
and micro-batches are capped at `batch_tokens` padded tokens, so a request's peak does not grow
with its size (docs/retrieval.md has the figures).
"""
from __future__ import annotations

import json
from typing import ClassVar

import numpy as np

from ..tensors import BYTES, N, TaskTensors, Tensor, texts
from .inputs import Inputs
from .sentence_folder import SentenceFolderPipeline


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    """/v2: each text's entries as one JSON string (their number varies by text)."""
    return {"sparse_embedding": np.array([json.dumps(r, ensure_ascii=False) for r in results],
                                         np.object_)}


def nonzero_by_weight(vector: np.ndarray, top_k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(ids, weights) of a (V,) vector's non-zero entries, heaviest first (equal weights by
    id), the first `top_k` only when given."""
    ids = np.flatnonzero(vector)
    if top_k is not None and top_k < len(ids):
        # the k heaviest (and every id tied with the k-th) before sorting only those
        kth = -np.partition(-vector[ids], top_k - 1)[top_k - 1]
        ids = ids[vector[ids] >= kth]
    order = np.lexsort((ids, -vector[ids]))[:top_k]
    return ids[order], vector[ids[order]]


class SparseEmbeddingPipeline(SentenceFolderPipeline):
    task = "sparse-embedding"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),),
                          (Tensor("sparse_embedding", BYTES, N),), texts, _to_tensors)
    # Padded tokens per session call. The MLM head's logits are tokens × V floats inside the
    # graph (bert-base's vocabulary: 122 KB a token), so the cap, not the request, bounds them:
    # a hard cap, one row past it at most.
    batch_tokens: ClassVar[int] = 512
    batch_rows: ClassVar[int] = 1

    def predict(self, read: Inputs, top_k, return_tokens, prompt_name, prompt,
                truncation_direction, batch_size):
        encs = self.encode(self.prompted(read, prompt_name, prompt),
                           direction=truncation_direction.lower())

        def post(batch, out):
            return [nonzero_by_weight(v, top_k) for v in out["sparse_embedding"]]  # (B, V)

        results = []
        for ids, weights in self.infer(encs, post, batch_size):
            entries = [{"index": i, "value": w} for i, w in zip(ids.tolist(), weights.tolist())]
            if return_tokens:
                for e in entries:
                    e["token"] = self.tokenizer.id_to_token(e["index"])
            results.append(entries)
        return self.unwrap(results, read)
