"""int8's judge (export/agreement.py): QA spans come from the runtime's own span decoder, and
they are the spans that maximise start + end logits, as a brute force finds them; a reranker's
agreement is the best document per query and the document pairs kept in order; an embedder's
is the nearest other sentence, where a near tie in fp32 is not a disagreement."""
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


def _around_first(*cosines: float) -> list[np.ndarray]:
    """One-token 'sentences': the first, and one more at each given cosine to it (orthogonal
    otherwise, so every other sentence is nearest the first)."""
    n = len(cosines) + 1
    e = np.zeros((n, n))
    e[0, 0] = 1
    for i, c in enumerate(cosines, 1):
        e[i, 0], e[i, i] = c, np.sqrt(1 - c * c)
    return [e[:, None, :].astype(np.float32)]


def test_nearest_neighbour_counts_a_swapped_near_tie_as_agreeing_and_a_clear_one_not():
    far = (0.2, 0.2, 0.2)  # the first sentence's typical neighbours: its row's spread is 0.7
    mask = np.ones((6, 1), np.int64)  # six sentences, one token each
    cosine = agreement.MEASURES["cosine"].metrics
    near = cosine(_around_first(0.900, 0.895, *far), _around_first(0.900, 0.905, *far), mask, None)
    assert near["nearest_neighbour"] == 1.0         # fp32 put int8's pick 0.005 below its own
    assert near["nearest_neighbour_exact"] == 5 / 6  # ...which the strict count calls a miss
    clear = cosine(_around_first(0.900, 0.750, *far), _around_first(0.900, 0.905, *far), mask,
                   None)
    assert clear["nearest_neighbour"] == clear["nearest_neighbour_exact"] == 5 / 6
    # a tie is relative to the row's spread: the same 0.005 where every sentence is that close
    crowded = (0.894, 0.894, 0.894)
    tight = cosine(_around_first(0.900, 0.895, *crowded), _around_first(0.900, 0.905, *crowded),
                   mask, None)
    assert tight["nearest_neighbour"] == 5 / 6
