"""Post-processing as pure numpy functions: scores, top-k, QA spans, entity grouping, pooling.

No tokenizer, no session, no Python loop over tokens where numpy can do it: each function takes
arrays for a whole micro-batch (or all windows of a question) and returns arrays. The
semantics follow transformers 4.57's pipelines (fill_mask.py, text_classification.py,
question_answering.py, token_classification.py); where bertonnx deliberately differs, the
function's docstring says so.
"""
from __future__ import annotations

import numpy as np

# transformers' masked-logit value in QA (select_starts_ends); kept so probabilities match.
QA_MASK_VALUE = -10000.0


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float32)))


def topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top-k of a 2-D array, best first: (values, indices), each (N, k)."""
    n = scores.shape[-1]
    k = min(k, n)
    if k < n:
        part = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
    else:
        part = np.broadcast_to(np.arange(n), scores.shape).copy()
    vals = np.take_along_axis(scores, part, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, axis=-1), np.take_along_axis(part, order, axis=-1)


# ---------------------------------------------------------------- text classification



def default_function(problem_type: str | None, num_labels: int) -> str:
    """transformers' TextClassificationPipeline.postprocess choice when none is given."""
    if problem_type == "regression":
        return "none"
    if problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    return "softmax"


def classification_scores(logits: np.ndarray, function: str) -> np.ndarray:
    if function == "sigmoid":
        return sigmoid(logits)
    if function == "softmax":
        return softmax(logits)
    if function == "none":
        return np.asarray(logits, dtype=np.float32)
    raise ValueError(function)


# ---------------------------------------------------------------- fill-mask

def mask_probabilities(logits: np.ndarray, target_ids: np.ndarray | None) -> np.ndarray:
    """Softmax over the vocabulary at each mask row (M, V), then restricted to the targets.

    As transformers does, the softmax runs over the whole vocabulary before the targets are
    picked, so target scores are true vocabulary probabilities (they do not sum to one).
    """
    probs = softmax(logits)
    return probs if target_ids is None else probs[:, target_ids]


# ---------------------------------------------------------------- question answering

def qa_probabilities(start_logits: np.ndarray, end_logits: np.ndarray, allowed: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window (W, T): start/end probabilities over the allowed tokens, and the null score.

    `allowed` = context tokens plus [CLS] (transformers keeps [CLS] in the softmax so that a
    model trained on SQuAD 2 can put its mass there). The null score is P(start=CLS)·P(end=CLS),
    taken before [CLS] is removed from the candidates.
    """
    start = softmax(np.where(allowed, start_logits, QA_MASK_VALUE))
    end = softmax(np.where(allowed, end_logits, QA_MASK_VALUE))
    return start, end, start[:, 0] * end[:, 0]


def qa_best_spans(start: np.ndarray, end: np.ndarray, context: np.ndarray, max_answer_len: int,
                  k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The k best valid spans of every window, as flat arrays (window, start, end, score).

    Ordered window by window, best first inside a window — the order transformers visits
    them. Valid = both ends in the context, start ≤ end < start + max_answer_len. Unlike
    transformers' `decode_spans`, invalid spans (end before start, [CLS] starts) never enter
    the pool, so they can neither crowd out nor pose as answers with score 0. The band
    (W, T, L) is computed instead of the full T×T outer product: L = max_answer_len ≪ T.
    """
    W, T = start.shape
    L = max(1, min(max_answer_len, T))
    ends = np.arange(T)[:, None] + np.arange(L)[None, :]           # (T, L)
    inside = ends < T
    ends = np.minimum(ends, T - 1)
    band = start[:, :, None] * end[:, ends]                          # (W, T, L)
    ok = context[:, :, None] & context[:, ends] & inside[None]
    band = np.where(ok, band, -1.0).reshape(W, T * L)
    vals, flat = topk(band, k)
    keep = vals >= 0.0
    win = np.broadcast_to(np.arange(W)[:, None], vals.shape)[keep]
    s, d = np.divmod(flat[keep], L)
    return win, s, s + d, vals[keep]


def valid_span_counts(context: np.ndarray, max_answer_len: int) -> np.ndarray:
    """Valid spans per window (W,): for each context token, the context tokens within reach."""
    c = context.astype(np.int64)
    csum = np.concatenate([np.zeros((len(c), 1), np.int64), np.cumsum(c, axis=1)], axis=1)
    T = c.shape[1]
    hi = np.minimum(np.arange(T) + max(1, max_answer_len), T)
    return ((csum[:, hi] - csum[:, :T]) * c).sum(axis=1)


def word_char_spans(word_ids: np.ndarray, offsets: np.ndarray, mask: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Each masked token's word as a char span (start of its first token, end of its last).

    Matches tokenizers' `Encoding.word_to_chars` on one window: only the word's tokens inside
    the window count, so a word cut by the window edge maps to its visible part.
    word_ids (W, T) with -1 for none, offsets (W, T, 2), mask (W, T) bool.
    """
    W, T = word_ids.shape
    n = W * T
    w = word_ids.reshape(-1)
    m = mask.reshape(-1)
    pos = np.arange(n)
    same_as_prev = np.zeros(n, dtype=bool)
    same_as_prev[1:] = m[1:] & m[:-1] & (w[1:] == w[:-1]) & (pos[1:] % T != 0)
    first = np.maximum.accumulate(np.where(same_as_prev, 0, pos))
    same_as_next = np.zeros(n, dtype=bool)
    same_as_next[:-1] = same_as_prev[1:]
    last = np.minimum.accumulate(np.where(same_as_next, n - 1, pos)[::-1])[::-1]
    off = offsets.reshape(n, 2)
    return off[first, 0].reshape(W, T), off[last, 1].reshape(W, T)


# ---------------------------------------------------------------- token classification



def word_groups(is_subword: np.ndarray) -> np.ndarray:
    """Start index of each word: a token that is not a sub-word opens one (the first always does)."""
    starts = ~np.asarray(is_subword, dtype=bool)
    if starts.size:
        starts[0] = True
    return np.flatnonzero(starts)


def aggregate_words(scores: np.ndarray, starts: np.ndarray, strategy: str
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Word-level (label, score) for first/average/max, as transformers' `aggregate_word`.

    scores (N, L) token probabilities; starts from `word_groups`. Returns (labels, scores) (Nw,).
    """
    n = scores.shape[0]
    if strategy == "first":
        s = scores[starts]
        lab = s.argmax(-1)
        return lab, s[np.arange(len(starts)), lab]
    if strategy == "average":
        counts = np.diff(np.r_[starts, n])
        mean = np.add.reduceat(scores, starts, axis=0) / counts[:, None]
        lab = mean.argmax(-1)
        return lab, mean[np.arange(len(starts)), lab]
    if strategy == "max":
        word = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
        best = scores.max(-1)
        # first token with the word's highest score (Python's max() keeps the first on ties)
        order = np.lexsort((np.arange(n), -best, word))
        pick = order[np.r_[0, np.flatnonzero(np.diff(word[order])) + 1]]
        lab = scores[pick].argmax(-1)
        return lab, scores[pick, lab]
    raise ValueError(strategy)


def entity_groups(labels: np.ndarray, is_begin: np.ndarray, tag_ids: np.ndarray) -> np.ndarray:
    """Start index of each entity group (transformers' `group_entities`).

    labels (N,) label ids of consecutive entities; is_begin[label] — the label is "B-…";
    tag_ids[label] — an id for the label's tag (the name without B-/I-). A group continues
    while the tag is unchanged and the new entity is not a B- label.
    """
    n = len(labels)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    tags = tag_ids[labels]
    new = np.ones(n, dtype=bool)
    new[1:] = (tags[1:] != tags[:-1]) | is_begin[labels[1:]]
    return np.flatnonzero(new)


def group_means(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    return np.add.reduceat(values, starts) / np.diff(np.r_[starts, n])


def merge_overlapping(starts: np.ndarray, ends: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Indices kept by transformers' `aggregate_overlapping_entities` (entities from windows).

    Sorted by start; an entity starting inside the kept one replaces it when it is longer, or
    as long with a higher score. Sequential by nature; runs once per entity, not per token.
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    kept = []
    prev = order[0]
    for i in order:
        if starts[prev] <= starts[i] < ends[prev]:
            cur_len, prev_len = ends[i] - starts[i], ends[prev] - starts[prev]
            if cur_len > prev_len or (cur_len == prev_len and scores[i] > scores[prev]):
                prev = i
        else:
            kept.append(prev)
            prev = i
    kept.append(prev)
    return np.asarray(kept, dtype=np.int64)


# ---------------------------------------------------------------- feature extraction



def pool(hidden: np.ndarray, attention_mask: np.ndarray, modes) -> np.ndarray:
    """(B, T, H) -> (B, H · len(modes)): each mode's vector over the attended tokens,
    concatenated in order, as sentence-transformers' Pooling computes them on right-padded
    rows (`_forward_padded`). mean counts [CLS] and [SEP]; cls is the first attended token
    (the first one unless prompt tokens were masked out); max fills masked tokens with -inf;
    weightedmean weighs token t by t + 1; lasttoken is the last attended one."""
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    B, T, _ = hidden.shape
    rows = np.arange(B)
    m = attention_mask[:, :, None].astype(hidden.dtype)                # (B, T, 1)
    out = []
    for mode in modes:
        if mode == "cls":
            out.append(hidden[rows, attention_mask.argmax(1)])
        elif mode == "max":
            out.append(np.where(m > 0, hidden, -np.inf).max(1).astype(hidden.dtype))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total, count = (hidden * m).sum(1), np.maximum(m.sum(1), 1e-9)
            out.append(total / (count if mode == "mean" else np.sqrt(count)))
        elif mode == "weightedmean":
            w = m * np.arange(1, T + 1, dtype=hidden.dtype)[None, :, None]
            out.append((hidden * w).sum(1) / np.maximum(w.sum(1), 1e-9))
        elif mode == "lasttoken":
            flipped = attention_mask[:, ::-1]
            back = np.where(flipped.max(1) == 0, T - 1, flipped.argmax(1))  # none: the last
            out.append((hidden * m)[rows, T - back - 1])
        else:
            raise ValueError(mode)
    return out[0] if len(out) == 1 else np.concatenate(out, axis=-1)


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def cosine_matrix(x: np.ndarray) -> np.ndarray:
    y = l2_normalize(np.asarray(x, dtype=np.float32))
    return y @ y.T


# sentence-transformers' similarity functions (util/similarity.py; SimilarityFunction values)
SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")


def similarity(a: np.ndarray, b: np.ndarray, fn: str = "cosine") -> np.ndarray:
    """(N, D) x (M, D) -> (N, M), higher is more similar: cosine, dot product, or the
    negative euclidean or manhattan distance."""
    if fn == "cosine":
        return l2_normalize(a) @ l2_normalize(b).T
    if fn == "dot":
        return a @ b.T
    diff = a[:, None, :] - b[None, :, :]
    if fn == "euclidean":
        return -np.sqrt((diff ** 2).sum(-1))
    if fn == "manhattan":
        return -np.abs(diff).sum(-1)
    raise ValueError(fn)


# ---------------------------------------------------------------- text

_CLEANUPS = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
             (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


def clean_up_tokenization(text: str) -> str:
    """transformers' `clean_up_tokenization` (applied after decode when the tokenizer config
    asks for it, as BERT's does)."""
    for a, b in _CLEANUPS:
        text = text.replace(a, b)
    return text
