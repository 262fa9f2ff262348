"""Evaluation metrics, pure Python: classification accuracy and macro-F1 (sklearn's definition),
entity-level precision/recall/F1 (CoNLL-2000 conlleval chunking, which `seqeval`'s default mode
follows), SQuAD exact match and F1 (the official evaluate-v1.1/v2.0 normalisation).

Written here rather than depending on scikit-learn + seqeval: each is a few lines, and the
references they follow are cited so the numbers compare.
"""
from __future__ import annotations

import collections
import re
import string


def accuracy(gold: list, pred: list) -> float:
    return sum(g == p for g, p in zip(gold, pred)) / max(1, len(gold))


def macro_f1(gold: list, pred: list) -> float:
    """Unweighted mean of per-class F1 over the classes in gold or pred (sklearn average='macro')."""
    labels = sorted(set(gold) | set(pred), key=str)
    scores = []
    for c in labels:
        tp = sum(g == c and p == c for g, p in zip(gold, pred))
        fp = sum(g != c and p == c for g, p in zip(gold, pred))
        fn = sum(g == c and p != c for g, p in zip(gold, pred))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return sum(scores) / max(1, len(scores))


def _split(tag: str) -> tuple[str, str]:
    if tag in ("O", "", None):
        return "O", ""
    if "-" in tag:
        prefix, _, kind = tag.partition("-")
        return prefix, kind
    return "I", tag


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) chunks of an IOB1/IOB2/IOBES sequence, by conlleval's start/end rules."""
    chunks, start, kind = set(), None, ""
    prev_prefix, prev_kind = "O", ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, k = _split(tag)
        ends = prev_prefix != "O" and (
            prefix in ("B", "S", "O") or k != prev_kind or prev_prefix in ("E", "S"))
        if ends and start is not None:
            chunks.add((kind, start, i - 1))
            start = None
        begins = prefix != "O" and (
            prefix in ("B", "S") or prev_prefix in ("O", "E", "S") or k != prev_kind)
        if begins:
            start, kind = i, k
        prev_prefix, prev_kind = prefix, k
    return chunks


def entity_prf(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Micro-averaged entity precision, recall, F1 over sentences, plus tag accuracy."""
    tp = n_pred = n_gold = 0
    tag_ok = tag_n = 0
    for g, p in zip(gold, pred):
        ge, pe = {(k, s, e) for k, s, e in entities(g)}, entities(p)
        tp += len(ge & pe)
        n_pred += len(pe)
        n_gold += len(ge)
        tag_ok += sum(a == b for a, b in zip(g, p))
        tag_n += len(g)
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1,
            "accuracy": tag_ok / max(1, tag_n), "entities": n_gold}


def normalize_answer(s: str) -> str:
    """SQuAD's official normalisation: lower case, drop punctuation, articles, extra spaces."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_f1(prediction: str, truth: str) -> float:
    p, t = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not p or not t:  # v2.0: an empty answer scores 1 only against an empty answer
        return float(p == t)
    common = collections.Counter(p) & collections.Counter(t)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def squad_scores(gold: dict[str, list[str]], pred: dict[str, str]) -> dict:
    """exact_match and f1 in percent, each the max over a question's gold answers; a question
    without answers (SQuAD v2.0 unanswerable) has the gold answer ""."""
    em = f1 = 0.0
    for qid, answers in gold.items():
        answers = answers or [""]
        p = pred.get(qid, "")
        em += max(float(normalize_answer(p) == normalize_answer(a)) for a in answers)
        f1 += max(squad_f1(p, a) for a in answers)
    n = max(1, len(gold))
    return {"exact_match": 100 * em / n, "f1": 100 * f1 / n, "total": len(gold)}
