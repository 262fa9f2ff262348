"""The numpy post-processing functions against straightforward loop implementations."""
from __future__ import annotations

import numpy as np
import pytest

from bertonnx.runtime.core import postprocess as pp


def test_topk_matches_sort():
    x = np.random.default_rng(0).normal(size=(4, 50)).astype(np.float32)
    vals, idx = pp.topk(x, 7)
    want = np.argsort(-x, axis=1)[:, :7]
    np.testing.assert_array_equal(idx, want)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, want, 1))
    assert pp.topk(x, 80)[1].shape == (4, 50)


def test_qa_best_spans_matches_brute_force():
    rng = np.random.default_rng(1)
    W, T, L = 3, 20, 4
    start, end = pp.softmax(rng.normal(size=(W, T))), pp.softmax(rng.normal(size=(W, T)))
    context = np.zeros((W, T), dtype=bool)
    context[:, 5:18] = True
    context[2, 12:] = False
    win, s, e, sc = pp.qa_best_spans(start, end, context, L, k=1000)
    for w in range(W):
        brute = sorted(((start[w, i] * end[w, j], i, j) for i in range(T) for j in range(T)
                        if context[w, i] and context[w, j] and i <= j < i + L), reverse=True)
        got = [(sc[n], s[n], e[n]) for n in np.flatnonzero(win == w)]
        assert [(i, j) for _, i, j in got] == [(i, j) for _, i, j in brute]
        np.testing.assert_allclose([g[0] for g in got], [b[0] for b in brute], rtol=1e-6)
    assert pp.valid_span_counts(context, L).tolist() == [len(np.flatnonzero(win == w))
                                                         for w in range(W)]


def test_word_char_spans_per_window():
    # window 0: words 0 0 1 | window 1 starts mid-word: 1 2 2 (a word cut by the edge)
    words = np.array([[-1, 0, 0, 1, -1], [-1, 1, 2, 2, -1]])
    offsets = np.array([[[0, 0], [0, 2], [2, 4], [5, 7], [0, 0]],
                        [[0, 0], [6, 7], [8, 9], [9, 12], [0, 0]]])
    mask = words >= 0
    ws, we = pp.word_char_spans(words, offsets, mask)
    assert ws[0, 1:4].tolist() == [0, 0, 5] and we[0, 1:4].tolist() == [4, 4, 7]
    assert ws[1, 1:4].tolist() == [6, 8, 8] and we[1, 1:4].tolist() == [7, 12, 12]


def test_aggregate_words_and_groups():
    scores = np.array([[.1, .9, 0], [.6, .3, .1], [.2, .2, .6], [.5, .4, .1]], dtype=np.float32)
    starts = pp.word_groups(np.array([False, True, True, False]))     # words: [0,1,2], [3]
    assert starts.tolist() == [0, 3]
    lab, s = pp.aggregate_words(scores, starts, "first")
    assert lab.tolist() == [1, 0] and np.allclose(s, [.9, .5])
    lab, s = pp.aggregate_words(scores, starts, "max")
    assert lab.tolist() == [1, 0] and np.allclose(s, [.9, .5])
    lab, s = pp.aggregate_words(scores, starts, "average")
    assert lab.tolist() == [1, 0] and np.allclose(s, [1.4 / 3, .5])
    # labels O B-X I-X B-Y: tags O X X Y
    is_begin = np.array([False, True, False, True])
    tag_ids = np.array([0, 1, 1, 2])
    assert pp.entity_groups(np.array([1, 2, 2, 1, 0, 0, 3]), is_begin, tag_ids).tolist() == \
        [0, 3, 4, 6]


def test_merge_overlapping_keeps_longer_then_higher():
    starts, ends = np.array([0, 0, 10, 12]), np.array([5, 8, 15, 15])
    scores = np.array([.9, .1, .2, .8])
    assert pp.merge_overlapping(starts, ends, scores).tolist() == [1, 2]


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_pool(pooling):
    h = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    m = np.array([[1, 1, 0], [1, 1, 1]])
    got = pp.pool(h, m, pooling)
    want = [h[0, :2].mean(0), h[1].mean(0)] if pooling == "mean" else [h[0, 0], h[1, 0]]
    np.testing.assert_allclose(got, np.stack(want))


def test_default_function_follows_transformers():
    assert pp.default_function("regression", 1) == "none"
    assert pp.default_function("multi_label_classification", 3) == "sigmoid"
    assert pp.default_function(None, 1) == "sigmoid"
    assert pp.default_function(None, 3) == "softmax"
    assert pp.default_function("single_label_classification", 3) == "softmax"
