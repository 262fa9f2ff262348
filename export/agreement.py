"""int8's verdict: task agreement with the fp32 torch model on real text.

Element-wise tolerances (export/parity.py) judge fp32; an int8 graph is judged by what its
users see — the same top-1 / top-5 words, labels, tags, spans and nearest neighbours as the fp32
model on real sentences (export/texts.py). The task record's `agreement` names the measure
(`MEASURES`: its batch and its metrics); the first metric is the verdict, against the
contract's INT8_MIN_AGREEMENT.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bertonnx.build import Bert
from bertonnx.runtime.core.batches import pad_encodings
from bertonnx.runtime.core.contract import INT8_MIN_AGREEMENT
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.postprocess import QA_MASK_VALUE, qa_best_spans, softmax
from bertonnx.runtime.core.tasks import task_record

from .parity import Reference, run_ort, take_reference
from .texts import QA_PAIRS, SENTENCES


def encode(tokenizer, texts, pairs=None, max_len: int = 512):
    """Right-padded (input_ids, attention_mask, token_type_ids) int64 tensors, rows cut to
    `max_len` (runtime/batches.py's builder), and the encodings."""
    encs = tokenizer.encode_batch(list(texts), list(pairs) if pairs is not None else None)
    T = min(max(len(e.ids) for e in encs), max_len)
    p = pad_encodings(encs, tokenizer.pad_token_id, width=T)
    return (torch.from_numpy(p.input_ids), torch.from_numpy(p.attention_mask),
            torch.from_numpy(p.token_type_ids), encs)


_MARKERS = ("Ġ", "▁")  # the word-start markers of byte-level BPE and SentencePiece


def _letters(token: str) -> str:
    """A token's text without WordPiece's ## or a BPE/SentencePiece word-start marker."""
    return token[2:] if token.startswith("##") else token.lstrip("".join(_MARKERS))


def _joins_previous(e, j: int) -> bool:
    """Token j continues token j-1's word: a ## piece (WordPiece), or letters right after
    letters with no word-start marker (BPE, Unigram)."""
    t, prev = e.tokens[j], e.tokens[j - 1]
    if t.startswith("##"):
        return True
    return (_letters(t).isalpha() and _letters(prev).isalpha() and not t.startswith(_MARKERS)
            and e.offsets[j][0] == e.offsets[j - 1][1])


def _mask_one_word(tokenizer, ids, encs):
    """Mask the middle one-token word of each row; returns the masked positions."""
    if tokenizer.mask_token_id is None:
        raise ArtifactError("the tokenizer has no mask token", "fill-mask needs a [MASK] token")
    positions = []
    for i, e in enumerate(encs):
        n = min(len(e.tokens), ids.shape[1])   # a row cut to the model's length ends there
        words = [j for j in range(1, n - 1)
                 if _letters(e.tokens[j]).isalpha() and not _joins_previous(e, j)
                 and not _joins_previous(e, j + 1)]
        j = words[len(words) // 2] if words else 1
        ids[i, j] = tokenizer.mask_token_id
        positions.append(j)
    return positions


def _context(tokenizer, questions, ids, mask) -> np.ndarray:
    """(B, T) bool, True at each (question, context) row's context tokens: past what the
    question encodes to alone (its special tokens included), no special token. Token type ids
    say the same for BERT, but RoBERTa's pairs have none."""
    q_len = np.array([len(e.ids) for e in tokenizer.encode_batch(list(questions))])
    specials = [t for t in (tokenizer.cls_token_id, tokenizer.sep_token_id) if t is not None]
    after = np.arange(ids.shape[1])[None, :] >= q_len[:, None]
    return after & mask.numpy().astype(bool) & ~np.isin(ids.numpy(), specials)


def _mask_top1(ref, got, mask, extra) -> dict:
    """fill-mask: the same top-1 (and top-5) words at each masked position."""
    rows = np.arange(len(extra))
    r, g = ref[0][rows, extra], got[0][rows, extra]  # (N, V) at the masked positions
    r5, g5 = np.argsort(-r, 1)[:, :5], np.argsort(-g, 1)[:, :5]
    overlap = [len(set(a) & set(b)) / 5 for a, b in zip(r5, g5)]
    return {"top1": float(np.mean(r5[:, 0] == g5[:, 0])), "top5_overlap": float(np.mean(overlap))}


def _argmax(ref, got, mask, extra) -> dict:
    """text-classification: the same best label per row."""
    return {"argmax": float(np.mean(ref[0].argmax(-1) == got[0].argmax(-1)))}


def _token_argmax(ref, got, mask, extra) -> dict:
    """token-classification: the same best tag per real token."""
    m = mask.astype(bool)
    return {"token_argmax": float(np.mean(ref[0].argmax(-1)[m] == got[0].argmax(-1)[m]))}


def _span(ref, got, mask, extra) -> dict:
    """question-answering: the same best span in each context (`extra`)."""
    spans_r, spans_g = best_spans(ref, extra), best_spans(got, extra)
    return {"span": float(np.mean([a == b for a, b in zip(spans_r, spans_g)]))}


# A neighbour the fp32 model scores almost as high as its nearest is a tie, not a
# disagreement: within NEAR_TIE of the row's spread (how far fp32's nearest sentence stands
# above its median one). all-mpnet-base-v2 puts export/texts.py's unrelated sentences
# 0.001-0.02 apart at the top (spreads 0.10-0.35); its SmoothQuant int8 graph, at cosine
# 0.997-0.999 to fp32, swapped 5 such ties of 40 (margins 0.7-5.4% of their rows' spread), so
# a strict count refused it (0.85-0.925). Relative, not absolute: a model whose sentences all
# sit within a hair of each other (a tiny random one) has tiny spreads, and a graph that broke
# it is still caught (tests/export/test_family_export.py, RoBERTa without its position ids).
NEAR_TIE = 0.1


def _cosine(ref, got, mask, extra) -> dict:
    """feature-extraction: which other sentence is nearest, by mean-pooled cosine — int8's
    choice agrees when it is fp32's, or fp32 scores it within NEAR_TIE of the row's spread
    below its own choice."""
    m = mask[..., None].astype(np.float32)
    ea, eb = [(o * m).sum(1) / m.sum(1) for o in (ref[0], got[0])]
    ea, eb = [e / np.linalg.norm(e, axis=1, keepdims=True) for e in (ea, eb)]
    sa, sb = ea @ ea.T, eb @ eb.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    chosen, best = sb.argmax(1), sa.max(1)
    median = np.nanmedian(np.where(np.isinf(sa), np.nan, sa), axis=1) if len(sa) > 2 else best
    tied = sa[np.arange(len(sa)), chosen] >= best - NEAR_TIE * (best - median)
    cos = (ea * eb).sum(1)
    return {"nearest_neighbour": float(np.mean(tied)),
            "nearest_neighbour_exact": float(np.mean(sa.argmax(1) == chosen)),
            "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}


def _sparse(ref, got, mask, extra) -> dict:
    """sparse-embedding: what retrieval with the vectors sees — which other sentence scores
    highest by dot product (SPLADE's similarity) — and what decoding them shows: the ten
    heaviest ids of each sentence, and the vectors' cosine."""
    a, b = (o.astype(np.float64) for o in (ref[0], got[0]))   # (N, V) each
    sa, sb = a @ a.T, b @ b.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    top_a, top_b = (np.argsort(-v, 1, kind="stable")[:, :10] for v in (a, b))
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.where(norms > 0, (a * b).sum(1) / np.where(norms > 0, norms, 1), 0.0)
    return {"nearest_neighbour": float(np.mean(sa.argmax(1) == sb.argmax(1))),
            "top10_overlap": float(np.mean([len(set(x) & set(y)) / 10
                                            for x, y in zip(top_a, top_b)])),
            "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}


def _ranking(ref, got, mask, extra) -> dict:
    """text-ranking: for each query (`extra`: how many documents each has, in row order), the
    same best document, and the share of its document pairs kept in the same order."""
    best, kept = [], []
    start = 0
    for n in extra:
        a, b = ref[0][start:start + n, 0], got[0][start:start + n, 0]
        start += n
        best.append(a.argmax() == b.argmax())
        i, j = np.triu_indices(n, 1)
        kept.append(np.mean(np.sign(a[i] - a[j]) == np.sign(b[i] - b[j])))
    return {"top1": float(np.mean(best)), "pair_order": float(np.mean(kept))}


def task_metrics(task: str, ref: list[np.ndarray], got: list[np.ndarray], mask: np.ndarray,
                 extra) -> dict:
    """Agreement between reference (fp32) and candidate outputs; the first key is the verdict."""
    return MEASURES[task_record(task).agreement].metrics(ref, got, mask, extra)


def best_spans(outputs: list[np.ndarray], context: np.ndarray, max_len: int = 30) -> list:
    """Each row's best (start, end) inside the context, end - start < max_len: the runtime's
    span decoder (the one `question-answering` answers with), k=1."""
    start, end = (softmax(np.where(context, o, QA_MASK_VALUE)) for o in outputs)
    win, s, e, _ = qa_best_spans(start, end, context, max_len, k=1)
    spans: list = [None] * len(context)
    for w, a, b in zip(win, s, e):
        spans[int(w)] = (int(a), int(b))
    return spans


def _texts_batch(tokenizer, max_len, texts, pairs):
    ids, mask, tt, encs = encode(tokenizer, texts or SENTENCES, None, max_len)
    return (ids, mask, tt), None


def _masked_batch(tokenizer, max_len, texts, pairs):
    """The sentences with one word masked; the metric needs the masked positions."""
    ids, mask, tt, encs = encode(tokenizer, texts or SENTENCES, None, max_len)
    return (ids, mask, tt), _mask_one_word(tokenizer, ids, encs)


def _pairs_batch(tokenizer, max_len, texts, pairs):
    """(question, context) pairs; the metric needs where each context is."""
    qs, cs = zip(*(pairs or QA_PAIRS))
    ids, mask, tt, encs = encode(tokenizer, qs, cs, max_len)
    return (ids, mask, tt), _context(tokenizer, qs, ids, mask)


def _ranking_batch(tokenizer, max_len, texts, pairs, per_query: int = 6):
    """Each QA question with its own context and the next five others (a query and its
    documents); the metric needs each query's document count."""
    qs, cs = zip(*(pairs or QA_PAIRS))
    n = min(per_query, len(cs))
    rows = [(q, cs[(i + k) % len(cs)]) for i, q in enumerate(qs) for k in range(n)]
    ids, mask, tt, _ = encode(tokenizer, *zip(*rows), max_len)
    return (ids, mask, tt), [n] * len(qs)


def _nli_batch(tokenizer, max_len, texts, pairs):
    """Zero-shot's (premise, hypothesis) pairs: each sentence with three labels' hypotheses."""
    rows = [(s, f"This example is about {label}.") for s in (texts or SENTENCES)
            for label in ("travel", "food", "weather")]
    ids, mask, tt, _ = encode(tokenizer, *zip(*rows), max_len)
    return (ids, mask, tt), None


@dataclass(frozen=True)
class Measure:
    """One way of judging agreement: the inputs it is judged on and the metrics."""

    batch: Callable   # (tokenizer, max_len, texts, pairs) -> ((ids, mask, tt), extra)
    metrics: Callable  # (ref, got, mask, extra) -> {metric: value}, the verdict first


# a task record's `agreement` -> its measure
MEASURES = {"mask-top1": Measure(_masked_batch, _mask_top1),
            "argmax": Measure(_texts_batch, _argmax),
            "token-argmax": Measure(_texts_batch, _token_argmax),
            "span": Measure(_pairs_batch, _span),
            "cosine": Measure(_texts_batch, _cosine),
            "sparse": Measure(_texts_batch, _sparse),
            "ranking": Measure(_ranking_batch, _ranking),
            "pair-argmax": Measure(_nli_batch, _argmax)}


def task_batch(task: str, tokenizer, max_len: int, texts=None, pairs=None):
    """Inputs for `task` from real text, and what the metric needs (mask positions, context)."""
    return MEASURES[task_record(task).agreement].batch(tokenizer, max_len, texts, pairs)


def agreement_reference(model: Bert, tokenizer, folder: Path, *, texts=None,
                        pairs=None) -> Reference:
    """The fp32 torch outputs on real text for the task (the first step of `agreement`)."""
    if tokenizer is None:
        raise ArtifactError("int8 parity needs the tokenizer", "export with tokenizer files")
    inputs, extra = task_batch(model.task, tokenizer, model.config.max_tokens, texts, pairs)
    return take_reference(model, [("texts", inputs)], folder, per_row=False, extra=extra)


def compare_agreement(reference: Reference, sess) -> dict:
    """int8 verdict: task agreement of the graph with the kept fp32 torch outputs."""
    case = reference.cases[0]
    ids, mask, tt = case.inputs
    ref, got = reference.outputs(case), run_ort(sess, ids, mask, tt)
    metrics = task_metrics(reference.task, ref, got, mask.numpy(), reference.extra)
    verdict = next(iter(metrics.values()))
    return {"mode": "int8", "metrics": metrics, "agreement": verdict,
            "min_agreement": INT8_MIN_AGREEMENT, "examples": int(ids.shape[0]),
            "reference": "fp32 torch model", "passed": bool(verdict >= INT8_MIN_AGREEMENT)}


def agreement(model: Bert, sess, tokenizer, *, texts=None, pairs=None) -> dict:
    """int8 verdict in one call: task agreement of the graph with the fp32 torch model."""
    with tempfile.TemporaryDirectory(prefix="bertonnx-agreement-") as d:
        return compare_agreement(agreement_reference(model, tokenizer, Path(d), texts=texts,
                                                     pairs=pairs), sess)
