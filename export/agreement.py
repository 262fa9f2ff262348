"""int8's verdict: task agreement with the fp32 torch model on real text.

Element-wise tolerances (export/parity.py) judge fp32; an int8 graph is judged by what its
users see — the same top-1 / top-5 words, labels, tags, spans and nearest neighbours as the fp32
model on real sentences (export/texts.py). The first metric of each task is the verdict,
against the contract's INT8_MIN_AGREEMENT.
"""
from __future__ import annotations

import numpy as np
import torch

from bertonnx.build import Bert
from bertonnx.runtime.batches import pad_encodings
from bertonnx.runtime.contract import INT8_MIN_AGREEMENT
from bertonnx.runtime.errors import ArtifactError
from bertonnx.runtime.postprocess import QA_MASK_VALUE, qa_best_spans, softmax

from .parity import run_ort, run_torch
from .texts import QA_PAIRS, SENTENCES


def encode(tokenizer, texts, pairs=None, max_len: int = 512):
    """Right-padded (input_ids, attention_mask, token_type_ids) int64 tensors, rows cut to
    `max_len` (runtime/batches.py's builder), and the encodings."""
    encs = tokenizer.encode_batch(list(texts), list(pairs) if pairs is not None else None)
    T = min(max(len(e.ids) for e in encs), max_len)
    p = pad_encodings(encs, tokenizer.pad_token_id, width=T)
    return (torch.from_numpy(p.input_ids), torch.from_numpy(p.attention_mask),
            torch.from_numpy(p.token_type_ids), encs)


def _mask_one_word(tokenizer, ids, encs):
    """Mask the middle whole word of each row; returns the masked positions."""
    if tokenizer.mask_token_id is None:
        raise ArtifactError("the tokenizer has no mask token", "fill-mask needs a [MASK] token")
    positions = []
    for i, e in enumerate(encs):
        words = [j for j, t in enumerate(e.tokens)
                 if 0 < j < len(e.tokens) - 1 and t.isalpha() and not t.startswith("##")
                 and not (j + 1 < len(e.tokens) and e.tokens[j + 1].startswith("##"))]
        j = words[len(words) // 2] if words else 1
        ids[i, j] = tokenizer.mask_token_id
        positions.append(j)
    return positions


def task_metrics(task: str, ref: list[np.ndarray], got: list[np.ndarray], mask: np.ndarray,
                 extra) -> dict:
    """Agreement between reference (fp32) and candidate outputs; the first key is the verdict."""
    if task == "fill-mask":
        rows = np.arange(len(extra))
        r, g = ref[0][rows, extra], got[0][rows, extra]  # (N, V) at the masked positions
        r5, g5 = np.argsort(-r, 1)[:, :5], np.argsort(-g, 1)[:, :5]
        overlap = [len(set(a) & set(b)) / 5 for a, b in zip(r5, g5)]
        return {"top1": float(np.mean(r5[:, 0] == g5[:, 0])), "top5_overlap": float(np.mean(overlap))}
    if task == "text-classification":
        return {"argmax": float(np.mean(ref[0].argmax(-1) == got[0].argmax(-1)))}
    if task == "token-classification":
        m = mask.astype(bool)
        return {"token_argmax": float(np.mean(ref[0].argmax(-1)[m] == got[0].argmax(-1)[m]))}
    if task == "question-answering":
        spans_r, spans_g = best_spans(ref, extra), best_spans(got, extra)
        return {"span": float(np.mean([a == b for a, b in zip(spans_r, spans_g)]))}
    # feature-extraction: which other sentence is nearest, by mean-pooled cosine
    m = mask[..., None].astype(np.float32)
    ea, eb = [(o * m).sum(1) / m.sum(1) for o in (ref[0], got[0])]
    ea, eb = [e / np.linalg.norm(e, axis=1, keepdims=True) for e in (ea, eb)]
    sa, sb = ea @ ea.T, eb @ eb.T
    np.fill_diagonal(sa, -np.inf)
    np.fill_diagonal(sb, -np.inf)
    cos = (ea * eb).sum(1)
    return {"nearest_neighbour": float(np.mean(sa.argmax(1) == sb.argmax(1))),
            "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean())}


def best_spans(outputs: list[np.ndarray], context: np.ndarray, max_len: int = 30) -> list:
    """Each row's best (start, end) inside the context, end - start < max_len: the runtime's
    span decoder (the one `question-answering` answers with), k=1."""
    start, end = (softmax(np.where(context, o, QA_MASK_VALUE)) for o in outputs)
    win, s, e, _ = qa_best_spans(start, end, context, max_len, k=1)
    spans: list = [None] * len(context)
    for w, a, b in zip(win, s, e):
        spans[int(w)] = (int(a), int(b))
    return spans


def task_batch(task: str, tokenizer, max_len: int, texts=None, pairs=None):
    """Inputs for `task` from real text, and what the metric needs (mask positions, context)."""
    if task == "question-answering":
        qs, cs = zip(*(pairs or QA_PAIRS))
        ids, mask, tt, encs = encode(tokenizer, qs, cs, max_len)
        context = ((tt == 1) & (mask == 1) & (ids != tokenizer.sep_token_id)).numpy()
        return (ids, mask, tt), context
    ids, mask, tt, encs = encode(tokenizer, texts or SENTENCES, None, max_len)
    extra = _mask_one_word(tokenizer, ids, encs) if task == "fill-mask" else None
    return (ids, mask, tt), extra


def agreement(model: Bert, sess, tokenizer, *, texts=None, pairs=None) -> dict:
    """int8 verdict: task agreement of the graph with the fp32 torch model on real text."""
    if tokenizer is None:
        raise ArtifactError("int8 parity needs the tokenizer", "export with tokenizer files")
    (ids, mask, tt), extra = task_batch(model.task, tokenizer,
                                        model.config.max_position_embeddings, texts, pairs)
    ref, got = run_torch(model, ids, mask, tt), run_ort(sess, ids, mask, tt)
    metrics = task_metrics(model.task, ref, got, mask.numpy(), extra)
    verdict = next(iter(metrics.values()))
    return {"mode": "int8", "metrics": metrics, "agreement": verdict,
            "min_agreement": INT8_MIN_AGREEMENT, "examples": int(ids.shape[0]),
            "reference": "fp32 torch model", "passed": bool(verdict >= INT8_MIN_AGREEMENT)}
