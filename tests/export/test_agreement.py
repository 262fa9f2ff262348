"""int8's judge (export/agreement.py): QA spans come from the runtime's own span decoder, and
they are the spans that maximise start + end logits, as a brute force finds them; a reranker's
agreement is the best document per query and the document pairs kept in order."""
from __future__ import annotations

import numpy as np

from bertonnx.export import agreement


def test_best_spans_is_the_brute_force_argmax_of_start_plus_end():
    rng = np.random.default_rng(0)
    B, T, L = 16, 40, 30
    start, end = rng.normal(size=(B, T)) * 3, rng.normal(size=(B, T)) * 3
    context = np.zeros((B, T), bool)
    for i in range(B):
        a = rng.integers(1, 20)
        context[i, a:rng.integers(a + 1, T)] = True
    got = agreement.best_spans([start.astype(np.float32), end.astype(np.float32)], context, L)
    for i in range(B):
        best, arg = -np.inf, None
        for s in np.flatnonzero(context[i]):
            for e in np.flatnonzero(context[i]):
                if s <= e < s + L and start[i, s] + end[i, e] > best:
                    best, arg = start[i, s] + end[i, e], (int(s), int(e))
        assert got[i] == arg, (i, got[i], arg)


def test_ranking_agreement_is_the_best_document_and_the_kept_pair_order():
    ref = [np.array([[3.0], [1.0], [2.0], [0.5], [0.7]])]   # queries of 3 and 2 documents
    same = agreement.MEASURES["ranking"].metrics(ref, ref, None, [3, 2])
    assert same == {"top1": 1.0, "pair_order": 1.0}
    got = [np.array([[2.0], [3.0], [1.0], [0.5], [0.7]])]   # the first query's best moved
    m = agreement.MEASURES["ranking"].metrics(ref, got, None, [3, 2])
    assert m["top1"] == 0.5 and m["pair_order"] == (1 / 3 + 1) / 2
