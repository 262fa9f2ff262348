"""multi-vector: ColBERT token vectors on onnxruntime, as PyLate's `ColBERT.encode` makes them.

    pipe = load("out/colbert")
    pipe(["what is paris?"], is_query=True)      # [array (query_length, dim)]
    pipe(["Paris is the capital of France."])    # [array (kept tokens, dim)]: documents

The graph answers the encoder's token vectors (B, T, H), as feature-extraction's does; the
folder's settings (runtime/core/colbert.py, recorded at export) run here: the query or
document prefix after [CLS], truncation to query_length / document_length tokens, a query
expanded with [MASK] to its full length (attended to only with attend_to_expansion_tokens), the
Dense projection(s), each token vector normalized, then the tokens PyLate keeps (a query's all;
a document's unpadded ones whose id is not in the skiplist). A sentence-transformers 6
MultiVectorEncoder folder runs the same way with its differences recorded (runtime/core/
multi_vector_encoder.py: a text prompt instead of the prefix token, "min" expansion, the skiplist
on queries too, expansion tokens kept or not). `normalize=False` leaves the
vectors as projected (PyLate's normalize_embeddings). PyLate's is_query defaults to True; here a
call encodes documents unless it says is_query=True (a document encoded as a query would be cut
to the query length). Scoring query against document vectors is `maxsim` (PyLate's
colbert_scores).
"""
from __future__ import annotations

import json

import numpy as np

from ..colbert import ColbertSettings
from ..errors import ArtifactError, InputError
from ..postprocess import l2_normalize
from ..sentence_modules import load_dense
from ..tensors import BYTES, N, TaskTensors, Tensor, texts
from .base import Pipeline, Work
from .folder import ExportFolder
from .inputs import Inputs, RankInput, read_texts
from .text_ranking import TextRankingPipeline
from .sentence_folder import _lowercase_first


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    """/v2: each text's (tokens, dim) vectors as one JSON string (their number varies)."""
    return {"embeddings": np.array([json.dumps(np.asarray(r).tolist()) for r in results],
                                   np.object_)}


def clustering():
    """scipy's hierarchical clustering, which pooling needs (InputError when it is missing)."""
    try:  # lazy: scipy is the colbert extra's, needed only to pool
        from scipy.cluster import hierarchy
    except ImportError:
        raise InputError("pool_factor needs scipy (PyLate's hierarchical clustering)",
                         "pip install 'bertonnx[colbert]', or leave pool_factor at 1") from None
    return hierarchy


def pool_tokens(hierarchy, vectors: np.ndarray, pool_factor: int, protected: int) -> np.ndarray:
    """PyLate's `pool_embeddings_hierarchical` on one document: the tokens after the first
    `protected` clustered by Ward linkage on cosine distance (scipy's `hierarchy`, as PyLate
    calls it) into len // pool_factor clusters, each replaced by its mean (not renormalized),
    after the protected ones."""
    keep, rest = vectors[:protected], vectors[protected:]
    n = len(rest)
    k = max(n // pool_factor, 1)
    if k >= n:   # nothing to merge
        return vectors
    distance = 1 - rest @ rest.T
    tree = hierarchy.linkage(distance[np.triu_indices(n, k=1)], method="ward")
    labels = hierarchy.fcluster(tree, t=k, criterion="maxclust") - 1
    sums = np.zeros((k, rest.shape[1]), rest.dtype)
    np.add.at(sums, labels, rest)
    counts = np.bincount(labels, minlength=k)
    # fcluster may make fewer than k clusters: the empty ones are left out, as PyLate does
    pooled = sums[counts > 0] / counts[counts > 0, None].astype(rest.dtype)
    return np.ascontiguousarray(np.concatenate([keep, pooled]), np.float32)


def maxsim(query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
    """Late-interaction scores (PyLate's colbert_scores): for each document, the sum over the
    query's tokens of the best dot product with any of the document's tokens."""
    return np.array([float((query @ d.T).max(axis=1).sum()) if len(d) else 0.0
                     for d in documents], dtype=np.float32)


class MultiVectorPipeline(Pipeline):
    """`settings`: the ColBERT folder's (prefixes, lengths, expansion, skiplist, Dense)."""

    task = "multi-vector"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("embeddings", BYTES, N),),
                          texts, _to_tensors)
    input_hint = ('a text or a list of texts, or {"query": "...", "documents": ["...", ...]} '
                  "(ranked by MaxSim) or a list of such objects")

    # -- inputs: texts to encode, or (as text-ranking's) queries with documents to rank -------

    @classmethod
    def read_inputs(cls, inputs) -> Inputs:
        """Texts (their vectors), or text-ranking's {"query", "documents"} objects (the
        documents ranked for each query by MaxSim: TEI's /rerank and Cohere's on this export)."""
        if isinstance(inputs, dict) or (isinstance(inputs, (list, tuple)) and inputs
                                        and all(isinstance(x, dict) for x in inputs)):
            return TextRankingPipeline.read_inputs(inputs)
        return read_texts(inputs)

    # a bulk row holds a text, or (a ranking row, as text-ranking's) a query and its documents
    row_fields = ("text", *RankInput._fields)

    @classmethod
    def input_of_row(cls, row):
        if row.get("query") is not None:
            return TextRankingPipeline.input_of_row(row)
        return super().input_of_row(row)

    @classmethod
    def is_json_input(cls, x, in_list: bool = False) -> bool:
        return isinstance(x, str) or TextRankingPipeline.is_json_input(x, in_list)

    @classmethod
    def count(cls, inputs: Inputs) -> int:
        """What --max-inputs bounds: one per text to encode, and each ranking's documents
        (text-ranking's count; a bulk chunk may hold both)."""
        return sum(len(r.documents) if isinstance(r, RankInput) else 1 for r in inputs.records)

    def __init__(self, folder: ExportFolder, session, **kwargs):
        super().__init__(folder, session, **kwargs)
        record, where = folder.settings_record(
            "ColBERT settings",
            "export a PyLate ColBERT or MultiVectorEncoder folder with --task multi-vector")
        settings = ColbertSettings.from_json(record, where)
        for m in settings.modules:
            if m.weights not in folder.manifest.files:
                raise ArtifactError(f"{where} does not list {m.weights}, which the runtime "
                                    "reads", "export the model again")
        self.settings = settings
        self.modules = tuple(load_dense(m, folder.path) for m in settings.modules)
        if settings.do_lower_case:
            _lowercase_first(self.tokenizer.backend)
        tok = self.tokenizer
        # PyLate's convert_tokens_to_ids: a token the vocabulary lacks is [UNK]
        self._prefix = {q: (tok.token_to_id(p) if tok.token_to_id(p) is not None
                            else tok.unk_token_id) if p else None
                        for q, p in ((True, settings.query_prefix),
                                     (False, settings.document_prefix))}
        # ... and so it skips [UNK] for a skiplist word it lacks; MultiVectorMask drops the word
        unknown = tok.unk_token_id if settings.skip_unknown else None
        self._skip = np.array(sorted({tok.token_to_id(w) if tok.token_to_id(w) is not None
                                      else unknown for w in settings.skiplist_words}
                                     - {None}), dtype=np.int64)
        # PyLate makes [MASK] the pad token: a query is expanded with it (or the folder's token)
        self._expand_id = tok.mask_token_id if tok.mask_token_id is not None else tok.pad_token_id
        if settings.expansion_token is not None:
            self._expand_id = tok.token_to_id(settings.expansion_token)
            if self._expand_id is None:
                raise ArtifactError(f"{where} expands queries with {settings.expansion_token!r}, "
                                    "which the tokenizer lacks", "export the model again")
        self.dimension = self.modules[-1].out_features if self.modules else None

    def rank(self, query: str, documents: list[str], top_k: int | None = None,
             return_documents: bool = False, batch_size: int | None = None) -> list[dict]:
        """`documents` ranked for `query` by MaxSim, in CrossEncoder.rank's shape (pipelines/
        text_ranking.py): {"corpus_id", "score", ("text")}, best first (ties in document
        order), the best `top_k`. The scores are pylate's colbert_scores of each pair (MaxSim)."""
        return self({"query": query, "documents": list(documents)}, top_k=top_k,
                    return_documents=return_documents, batch_size=batch_size)

    def cut(self, is_query: bool) -> int:
        """The tokens of a query's or document's text it keeps (special tokens and prompt
        counted): its length (query_length / document_length; None: the model's) less the
        prefix marker's place, so the row fits the model even where the folder's length does
        not (PyLate's position embeddings would overflow there)."""
        s = self.settings
        length = min((s.query_length if is_query else s.document_length) or self.max_length,
                     self.max_length)
        return length - 1 if self._prefix[is_query] is not None else length

    def longest(self, is_query: bool) -> int:
        """The longest row a query or document makes (its cut and the prefix marker): batch
        widths rounded up for the engine stop there. Documents cut at PyLate's 180 tokens are
        common (112 of 256 prose passages of 20-200 words), and OpenVINO's widths in steps of
        16 made them 192 wide: 3.6% more tokens over the 256 (37,760 against 36,404)."""
        return self.cut(is_query) + (self._prefix[is_query] is not None)

    def prompted(self, texts: list[str], is_query: bool) -> list[str]:
        """`texts` as the tokenizer reads them: after a MultiVectorEncoder's prompt (text before
        the input, tokenized and cut with it)."""
        prompt = self.settings.query_prompt if is_query else self.settings.document_prompt
        return [prompt + t for t in texts] if prompt else list(texts)

    @property
    def kept_tokens(self) -> int:
        # a document's cut: /rerank's texts and /embed_multi's documents (TEI's max_input_length)
        return self.cut(False)

    def rows(self, texts: list[str], is_query: bool) -> list[tuple[list[int], int]]:
        """Each text's token ids as the graph reads them and how many are attended to
        (ColBERT.tokenize)."""
        s = self.settings
        prefix = self._prefix[is_query]
        cut = self.cut(is_query)
        # through the shared encoder: what `work` priced is taken, a huge text is cut first
        encs = self.encode(self.prompted(texts, is_query), warn=False, max_length=cut)
        expand = is_query and s.do_query_expansion
        # "min" expansion pads to the floor only; PyLate's ("fixed") to the cut
        width = min(s.query_floor, cut) if s.query_floor is not None else cut
        rows = []
        for e in encs:
            ids = list(e.ids)
            if expand:
                ids += [self._expand_id] * (width - len(ids))
            attended = len(e.ids)
            if prefix is not None:
                ids.insert(1, prefix)
                attended += 1
            if expand and s.attend_to_expansion_tokens:
                attended = len(ids)
            rows.append((ids, attended))
        return rows

    def estimate(self, inputs: Inputs, **params) -> Work:
        ranks = [r for r in inputs.records if isinstance(r, RankInput)]
        texts = [r for r in inputs.records if not isinstance(r, RankInput)]
        rows = (self.rows(texts, bool(params.get("is_query")))
                + self.rows([r.query for r in ranks], True)
                + self.rows([d for r in ranks for d in r.documents], False))
        return Work(sum(len(ids) for ids, _ in rows))

    def vectors(self, hidden: np.ndarray, normalize: bool) -> np.ndarray:
        """(B, T, H) token vectors -> (B, T, D): the Dense modules, then unit length."""
        x = hidden
        for m in self.modules:
            x = m.project(x)
        return l2_normalize(x) if normalize else x

    def predict(self, read: Inputs, is_query, normalize, pool_factor, protected_tokens,
                top_k, return_documents, batch_size):
        # texts are encoded; rankings (a bulk chunk may hold both) have every query in one
        # call and every document in another
        records = read.records
        ranks = [r for r in records if isinstance(r, RankInput)]
        texts = [r for r in records if not isinstance(r, RankInput)]
        pool = (pool_factor, protected_tokens)
        vectors = iter(self.embed(texts, is_query, normalize, batch_size, pool) if texts else ())
        queries = self.embed([r.query for r in ranks], True, normalize, batch_size)
        docs = self.embed([d for r in ranks for d in r.documents], False, normalize, batch_size,
                          pool)
        ranked, start = [], 0
        for r, q in zip(ranks, queries):
            scores = maxsim(q, docs[start:start + len(r.documents)])
            start += len(r.documents)
            # CrossEncoder.rank's shape and order: best first, ties in document order
            ranked.append([{"corpus_id": int(i), "score": float(scores[i]),
                            **({"text": r.documents[i]} if return_documents else {})}
                           for i in np.argsort(-scores, kind="stable")[:top_k]])
        ranked = iter(ranked)
        return self.unwrap([next(ranked) if isinstance(r, RankInput) else next(vectors)
                            for r in records], read)

    def embed(self, texts: list[str], is_query: bool, normalize: bool,
              batch_size: int | None, pool: tuple[int, int] = (1, 1)) -> list[np.ndarray]:
        """Each text's kept token vectors, (tokens, dim); a document's pooled by `pool`
        (pool_factor, protected_tokens) as PyLate's encode pools them."""
        pooling = pool[0] > 1 and not is_query
        hierarchy = clustering() if pooling else None   # refused before the model runs
        rows = self.rows(texts, is_query)
        results: list = [None] * len(rows)
        s = self.settings
        # every query token, the expansion's included (PyLate's; MultiVectorMask's), or those
        # attended to (a MultiVectorEncoder without a MultiVectorMask)
        keep_all = is_query and s.do_query_expansion and s.score_expansion
        skip = ("query" if is_query else "document") in s.skiplist_tasks and len(self._skip)
        only = (None if is_query or s.keep_only_token_ids is None
                else np.array(s.keep_only_token_ids, np.int64))
        def feeds(batch):
            mask = batch.attention_mask
            for r, i in enumerate(batch.index):   # [MASK] expansion: attended or not
                mask[r, rows[i][1]:] = 0
            return {"input_ids": batch.input_ids, "attention_mask": mask,
                    "token_type_ids": np.zeros_like(batch.input_ids)}

        for batch, out in self.session.run_each(
                self.batches([_Row(ids) for ids, _ in rows], batch_size, self.longest(is_query)),
                feeds, self.outputs):
            mask = batch.attention_mask
            out = self.vectors(out["last_hidden_state"], normalize)            # (B, T, D)
            for r, (i, n) in enumerate(zip(batch.index, batch.lengths)):
                ids = batch.input_ids[r, :n]
                keep = np.ones(n, bool) if keep_all else mask[r, :n].astype(bool)
                if skip:
                    keep &= ~np.isin(ids, self._skip)
                if only is not None:
                    keep &= np.isin(ids, only)
                results[i] = np.ascontiguousarray(out[r, :n][keep], np.float32)
        if pooling:
            results = [pool_tokens(hierarchy, v, *pool) for v in results]
        return results


class _Row:
    """A row of token ids as the batch builder reads an encoding (one segment)."""

    __slots__ = ("ids", "type_ids")

    def __init__(self, ids: list[int]):
        self.ids, self.type_ids = ids, [0] * len(ids)
