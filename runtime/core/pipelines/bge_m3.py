"""bge-m3: BGE-M3's dense, sparse and multi-vector embeddings on onnxruntime, from one session run
per micro-batch, as FlagEmbedding's `BGEM3FlagModel.encode(..., return_dense=True,
return_sparse=True, return_colbert_vecs=True)` makes them:

    pipe = load("out/bge-m3")
    pipe("Paris is the capital of France.")
    # {"dense_vecs": array (H,), "lexical_weights": [{"index": 4865, "value": 0.31}, ...],
    #  "colbert_vecs": array (tokens - 1, D)}

The graph answers the encoder's token vectors (B, T, H), as feature-extraction's does; the two
heads the export carried (runtime/core/bge_m3.py) run here on them: dense = the [CLS] vector;
lexical weights = relu(sparse_linear(h)) per token, the largest per token id, the cls/eos/pad/unk
ids and zero weights left out (FlagEmbedding's `_process_token_weights`), listed heaviest first
(equal weights by id) in TEI's /embed_sparse names as pipelines/sparse_embedding.py lists them;
colbert vectors = colbert_linear on each attended token after [CLS] (the </s> included).
`normalize` (BGEM3FlagModel's normalize_embeddings, on by default) makes the dense and colbert
vectors unit length. Texts are cut at `max_length` tokens, 512 unless told (encode's
passage_max_length), as FlagEmbedding cuts them. `return_*` leave out what is not wanted (a
request for several gets them from the same run). Results are one dict per text, with only the
asked-for keys.
"""
from __future__ import annotations

import json

import numpy as np

from ..bge_m3 import read_heads
from ..errors import InputError
from ..postprocess import l2_normalize
from ..tensors import BYTES, N, TaskTensors, Tensor, texts
from .base import Pipeline, Work
from .folder import ExportFolder
from .inputs import Inputs

DEFAULT_MAX_LENGTH = 512     # BGEM3FlagModel's passage_max_length (encode's max_length)
OUTPUTS = ("dense_vecs", "lexical_weights", "colbert_vecs")   # encode's keys, in its order


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    """/v2: each text's outputs as one JSON string (the token and weight counts vary)."""
    return {"embeddings": np.array([json.dumps(_plain(r)) for r in results], np.object_)}


def _plain(result: dict) -> dict:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in result.items()}


def lexical_weights(ids: np.ndarray, weights: np.ndarray, unused: np.ndarray) -> list[dict]:
    """One text's {index, value} entries: each id's largest weight over its tokens, the
    `unused` ids and weights ≤ 0 left out, heaviest first (equal weights by id)."""
    keep = (weights > 0) & ~np.isin(ids, unused)
    ids, weights = ids[keep], weights[keep]
    order = np.lexsort((-weights, ids))               # by id, the heaviest of each id first
    ids, weights = ids[order], weights[order]
    first = np.ones(len(ids), bool)
    first[1:] = ids[1:] != ids[:-1]
    ids, weights = ids[first], weights[first]
    order = np.lexsort((ids, -weights))
    return [{"index": i, "value": w}
            for i, w in zip(ids[order].tolist(), weights[order].tolist())]


def lexical_matching_score(weights_1, weights_2):
    """FlagEmbedding's compute_lexical_matching_score: the sum, over the ids both hold, of the
    two weights' product. Each side one text's lexical weights (this pipeline's {index, value}
    list, or FlagEmbedding's {id: weight} dict) or a list of them: two lists give the
    (len(1), len(2)) array of every pair's score."""
    if _one_text(weights_1) and _one_text(weights_2):
        a, b = _by_id(weights_1), _by_id(weights_2)
        return sum(w * b[i] for i, w in a.items() if i in b)
    if _one_text(weights_1) or _one_text(weights_2):
        raise InputError("give one text's lexical weights on each side, or a list of them on "
                         "both", "as FlagEmbedding's compute_lexical_matching_score takes them")
    return np.array([[lexical_matching_score(a, b) for b in weights_2] for a in weights_1])


def colbert_score(q_reps: np.ndarray, p_reps: np.ndarray) -> float:
    """FlagEmbedding's colbert_score: each query vector's best dot product with a passage
    vector, averaged over the query's vectors (PyLate's MaxSim sums them)."""
    q, p = np.asarray(q_reps, np.float32), np.asarray(p_reps, np.float32)
    return float((q @ p.T).max(axis=1).sum() / len(q))


def _one_text(weights) -> bool:
    """One text's weights: FlagEmbedding's dict, or this pipeline's list of {index, value}
    entries (an empty list: a text without any); else a list of texts' weights."""
    return isinstance(weights, dict) or (isinstance(weights, list) and all(
        isinstance(e, dict) and "index" in e for e in weights))


def _by_id(weights) -> dict[int, float]:
    if isinstance(weights, dict):   # FlagEmbedding's: token ids as strings
        return {int(i): float(w) for i, w in weights.items()}
    return {int(e["index"]): float(e["value"]) for e in weights}


def token_weights(flat: np.ndarray, heads) -> np.ndarray:
    """(N, H) token vectors -> (N,) lexical weights: relu(sparse_linear(h))."""
    return np.maximum(flat @ heads.sparse_weight.T + heads.sparse_bias, 0)[:, 0]


def colbert_projection(flat: np.ndarray, heads) -> np.ndarray:
    """(N, H) token vectors -> (N, D): colbert_linear(h), as one 2-D product."""
    return flat @ heads.colbert_weight.T + heads.colbert_bias


class BgeM3Pipeline(Pipeline):
    """`heads`: the export's colbert and sparse linear layers (runtime/core/bge_m3.py)."""

    task = "bge-m3"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("embeddings", BYTES, N),),
                          texts, _to_tensors)

    def __init__(self, folder: ExportFolder, session, **kwargs):
        super().__init__(folder, session, **kwargs)
        record, where = folder.settings_record(
            "BGE-M3 heads", "export a BGE-M3 folder (BAAI/bge-m3) with --task bge-m3")
        self.heads = read_heads(folder.path, record, where)
        tok = self.tokenizer
        # FlagEmbedding's unused_tokens: the cls, eos, pad and unk tokens' ids
        eos = tok.token_to_id(tok.eos_token) if tok.eos_token else None
        self._unused = np.array(sorted({tok.cls_token_id, eos, tok.pad_token_id,
                                        tok.unk_token_id} - {None}), np.int64)
        self.dimension = self.heads.colbert_weight.shape[0]

    # FlagEmbedding's score helpers, under its names (BGEM3FlagModel's methods)
    compute_lexical_matching_score = staticmethod(lexical_matching_score)
    colbert_score = staticmethod(colbert_score)

    def compute_score(self, sentence_pairs, batch_size: int | None = None,
                      max_query_length: int | None = None,
                      max_passage_length: int | None = None,
                      weights_for_different_modes: list[float] | None = None) -> dict | list:
        """BGEM3FlagModel.compute_score: each (query, passage) pair's "dense", "sparse" and
        "colbert" scores and their weighted means "sparse+dense" and "colbert+sparse+dense"
        (weights for dense, sparse, colbert; 1, 1, 1 unless given), a list per key (one pair:
        one float). Each pair is scored alone: FlagEmbedding's batches pad passages with zero
        colbert vectors that a query token whose real matches are all negative takes as its
        best (0), so there its colbert score depends on the pair's batch."""
        if len(sentence_pairs) == 0:   # FlagEmbedding's answer to no pairs
            return []
        one = len(sentence_pairs) == 2 and all(isinstance(t, str) for t in sentence_pairs)
        pairs = [tuple(sentence_pairs)] if one else [tuple(p) for p in sentence_pairs]
        if any(len(p) != 2 or not all(isinstance(t, str) for t in p) for p in pairs):
            raise InputError("sentence_pairs must be (query, passage) pairs of texts",
                             'pass [("a query", "a passage"), ...]')
        weights = [1.0, 1.0, 1.0] if weights_for_different_modes is None else [
            float(w) for w in weights_for_different_modes]
        if len(weights) != 3:
            raise InputError("weights_for_different_modes takes 3 weights (dense, sparse, "
                             f"colbert), got {len(weights)}", "pass e.g. [0.4, 0.2, 0.4]")
        q = self([a for a, _ in pairs], max_length=max_query_length, batch_size=batch_size)
        p = self([b for _, b in pairs], max_length=max_passage_length, batch_size=batch_size)
        s = {"dense": [float(x["dense_vecs"] @ y["dense_vecs"]) for x, y in zip(q, p)],
             "sparse": [float(lexical_matching_score(x["lexical_weights"], y["lexical_weights"]))
                        for x, y in zip(q, p)],
             "colbert": [colbert_score(x["colbert_vecs"], y["colbert_vecs"])
                         for x, y in zip(q, p)]}
        w_dense, w_sparse, w_colbert = weights
        s["sparse+dense"] = [(b * w_sparse + a * w_dense) / (w_sparse + w_dense)
                             for a, b in zip(s["dense"], s["sparse"])]
        s["colbert+sparse+dense"] = [(c * w_colbert + b * w_sparse + a * w_dense) / sum(weights)
                                     for a, b, c in zip(s["dense"], s["sparse"], s["colbert"])]
        return {k: v[0] for k, v in s.items()} if one else s

    def cut(self, max_length: int | None) -> int:
        """Tokens per text: `max_length`, else encode's 512, within the model's length."""
        return min(DEFAULT_MAX_LENGTH if max_length is None else max_length, self.max_length)

    @property
    def kept_tokens(self) -> int:
        return self.cut(None)

    def estimate(self, inputs: Inputs, **params) -> Work:
        """Each text's tokens, cut where the call cuts them (usage, --max-tokens); the call
        takes these encodings (priced.py)."""
        return Work(sum(len(e.ids) for e in self._encode(inputs, params.get("max_length"))))

    def _encode(self, inputs: Inputs, max_length: int | None) -> list:
        # FlagEmbedding cuts on the right without a warning
        return self.encode(list(inputs.records), warn=False, max_length=self.cut(max_length))

    def predict(self, read: Inputs, return_dense, return_sparse, return_colbert_vecs,
                normalize, max_length, batch_size):
        wanted = dict(zip(OUTPUTS, (return_dense, return_sparse, return_colbert_vecs)))
        if not any(wanted.values()):
            raise InputError("return_dense, return_sparse and return_colbert_vecs are all "
                             "false: nothing to answer", "ask for at least one of them")
        encs = self._encode(read, max_length)
        h = self.heads

        def post(batch, out):
            hidden = out["last_hidden_state"]                                 # (B, T, H)
            B, T, H = hidden.shape
            flat = hidden.reshape(B * T, H)
            dense = hidden[:, 0]
            if normalize:
                dense = l2_normalize(dense)
            if wanted["lexical_weights"]:
                weights = token_weights(flat, h).reshape(B, T)
            if wanted["colbert_vecs"]:   # one product for the micro-batch
                colbert = colbert_projection(flat, h).reshape(B, T, -1)
            rows = []
            for r, n in enumerate(batch.lengths):
                row = {}
                if wanted["dense_vecs"]:
                    row["dense_vecs"] = np.ascontiguousarray(dense[r], np.float32)
                if wanted["lexical_weights"]:
                    row["lexical_weights"] = lexical_weights(batch.input_ids[r, :n],
                                                             weights[r, :n], self._unused)
                if wanted["colbert_vecs"]:   # the tokens after [CLS]
                    vecs = colbert[r, 1:n]
                    row["colbert_vecs"] = np.ascontiguousarray(
                        l2_normalize(vecs) if normalize else vecs, np.float32)
                rows.append(row)
            return rows

        return self.unwrap(self.infer(encs, post, batch_size), read)
