"""runtime/core/pipelines/priced.py: what `work` tokenized to price a call, the call takes."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.pipelines.priced import PricedEncodings

from tests.conftest import CLS, EMB

TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris with music", "paris"]
# past the tiny models' 64 positions: several windows when chunked
LONG = " ".join(["the cat sat on the mat by the river in paris with music"] * 12)


class Counting:
    """A tokenizer copy that counts the inputs it encodes."""

    def __init__(self, backend, seen: list):
        self.backend, self.seen = backend, seen

    def encode_batch(self, batch):
        self.seen.extend(batch)
        return self.backend.encode_batch(batch)


def counted(pipe, monkeypatch) -> list:
    seen: list = []
    backend = pipe.backend
    monkeypatch.setattr(pipe, "backend", lambda *a, **k: Counting(backend(*a, **k), seen))
    return seen


@pytest.mark.parametrize("name, inputs, params", [
    (EMB, TEXTS, {}),
    (CLS, [{"text": "the cat", "text_pair": "a mat"}, {"text": "paris", "text_pair": "music"}],
     {"top_k": None}),
    (EMB, [LONG, "paris"], {"long_inputs": "chunk"}),   # priced by its windows
])
def test_a_priced_call_tokenizes_nothing_again(tiny_export, monkeypatch, name, inputs, params):
    want = load(tiny_export(name))(inputs, **params)   # a pipeline that priced nothing
    pipe = load(tiny_export(name))
    seen = counted(pipe, monkeypatch)
    read = pipe.read_inputs(inputs)
    work = pipe.work(read, **params)
    assert len(seen) == len(inputs) and work.tokens > 0
    got = pipe(inputs, **params)
    assert len(seen) == len(inputs)                    # the call encoded none of them again
    assert len(pipe._priced) == 0 and pipe._priced.tokens == 0   # each taken once
    if name == EMB:
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))

    else:
        assert got == want
    pipe(inputs, **params)                             # a second call tokenizes afresh
    assert len(seen) == 2 * len(inputs)


def test_only_what_was_priced_the_same_way_is_taken(tiny_export, monkeypatch):
    pipe = load(tiny_export(EMB))
    seen = counted(pipe, monkeypatch)
    pipe.work(pipe.read_inputs(TEXTS[:2]))
    seen.clear()
    pipe(TEXTS)                                 # the third text was never priced
    assert seen == [TEXTS[2]]
    pipe.work(pipe.read_inputs(TEXTS[:1]))
    seen.clear()
    pipe(TEXTS[:1], truncation_direction="left")  # another truncation: encoded for itself
    assert seen == TEXTS[:1] and len(pipe._priced) == 1


def test_a_check_of_what_was_priced_reads_it_and_leaves_it_to_the_call(tiny_export, monkeypatch):
    # a refusal past a length (TEI's truncate false) reads the priced encodings, not takes them
    pipe = load(tiny_export(EMB))
    seen = counted(pipe, monkeypatch)
    inputs = ["paris", LONG, TEXTS[1]]
    pipe.work(pipe.read_inputs(inputs))
    assert pipe.overflowing(inputs) == [1] and len(seen) == 3   # read: nothing encoded again
    assert len(pipe._priced) == 3
    assert pipe.overflowing(inputs, max_length=4) == [1, 2]   # another cut: made, kept not
    assert len(seen) == 6 and len(pipe._priced) == 3
    pipe(inputs)
    assert len(seen) == 6 and len(pipe._priced) == 0          # the call took what was priced


class Enc:
    def __init__(self, n: int):
        self.ids = [0] * n


def test_kept_tokens_stay_under_the_limit_oldest_dropped_first():
    kept = PricedEncodings(limit=10)
    with kept.pricing():
        for k in range(5):
            kept.through([("k", k)], lambda at: [Enc(4) for _ in at])
    assert kept.tokens <= 10 and len(kept) == 2
    made = []
    got = kept.through([("k", k) for k in range(5)], lambda at: made.extend(at) or
                       [Enc(1) for _ in at])
    assert made == [0, 1, 2] and [len(e.ids) for e in got] == [1, 1, 1, 4, 4]
    assert kept.tokens == 0 and len(kept) == 0


def test_pricing_on_one_thread_keeps_nothing_for_a_call_on_another():
    kept = PricedEncodings()
    inside, done = threading.Event(), threading.Event()

    def price():
        with kept.pricing():
            inside.set()
            done.wait(10)

    t = threading.Thread(target=price)
    t.start()
    inside.wait(10)
    kept.through([("a",)], lambda at: [Enc(3) for _ in at])   # another thread's call
    done.set()
    t.join(10)
    assert len(kept) == 0
