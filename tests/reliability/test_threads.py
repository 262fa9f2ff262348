"""8 threads × many calls on one loaded pipeline give exactly the sequential results.

The threading model (docs/reliability.md, "Threading model"): one onnxruntime session per
pipeline, shared — `InferenceSession.run` is thread-safe; the shared `tokenizers.Tokenizer` is
only read (encode/decode take `&self`); truncation settings live in per-setting copies cached
under a lock (`Pipeline.backend`), so no call mutates state another call reads. Each test loads
a fresh pipeline so that the cache is also filled concurrently, not only read.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bertonnx.runtime import load

THREADS = 8
ROUNDS = 6          # each thread runs every call ROUNDS times, in its own shuffled order

SENTENCES = ["the cat sat on the mat .", "paris is a city .", "he was in london with his dog",
             "music and film , love and light", "the river ran through the old city " * 6,
             "who made the game ?", "she said no", "many people work in the house " * 9]


def _calls(task: str) -> list:
    if task == "fill-mask":
        return [(("the [MASK] sat .",), {}), (("paris is a [MASK] . " * 5,), {"top_k": 3}),
                ((["a [MASK] and [MASK]", "the dog [MASK]"],), {"top_k": 2}),
                (("he [MASK] home",), {"targets": ["went", "came", "house"]})]
    if task == "text-classification":
        return [((s,), {"top_k": None}) for s in SENTENCES] + [
            (([{"text": "the cat", "text_pair": "the dog"}, SENTENCES[4]],), {})]
    if task == "question-answering":
        ctx = " ".join(SENTENCES) * 2                     # several windows
        return [((), {"question": q, "context": ctx, "top_k": k, "max_seq_len": n})
                for q, k, n in (("where is the cat", 1, 64), ("who said no", 3, 48),
                                ("what is paris", 2, 32), ("who made the game", 1, None))]
    if task == "token-classification":
        return [((s,), {"aggregation_strategy": a, "ignore_labels": []})
                for s, a in zip(SENTENCES, ["none", "simple", "first", "average", "max"] * 2)]
    return [((SENTENCES,), {"normalize": True, "return_tensors": True})] + [
        ((s,), {"pooling": "cls"}) for s in SENTENCES]


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("task", ["fill-mask", "text-classification", "question-answering",
                                  "token-classification", "feature-extraction"])
def test_threads_match_sequential(tiny_export, task):
    calls = _calls(task)
    expected = [load(tiny_export(task))(*a, **kw) for a, kw in calls]   # sequential, own pipe
    pipe = load(tiny_export(task))                                        # shared by threads
    start = threading.Barrier(THREADS)

    def worker(seed: int) -> list[tuple[int, object]]:
        order = np.random.default_rng(seed).permutation(np.tile(np.arange(len(calls)), ROUNDS))
        start.wait()
        return [(int(i), pipe(*calls[i][0], **calls[i][1])) for i in order]

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(worker, range(THREADS)))
    n = 0
    for per_thread in results:
        for i, got in per_thread:
            assert _same(got, expected[i]), (task, i)
            n += 1
    assert n == THREADS * ROUNDS * len(calls)
