"""Encodings made to price a call, handed to the call that runs it: one tokenization, not two.

The server prices each request before it queues it (`Pipeline.work`: its tokens against the
limits), which tokenizes every input; the pipeline call that later runs the request tokenized
them all again. At one short text per request that second pass was a seventh of the event
loop's busy time on a compute-bound server (docs/benchmarks-history.md, "Serving"). Now `work`
keeps what it makes, and `encode` takes an input's encoding from here when the same input under
the same truncation was priced: the same tokenizer copy made it from the same text, so it is
the encoding the call would make. Long inputs chunked (feature-extraction's long_inputs="chunk")
are priced by their windows (`encode_windows`), each input's encoding kept with its overflowing
windows. (QA and token classification price their windows by arithmetic, not by making them: a
stride near the window's room multiplies them.)
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Callable, Hashable, Sequence

# tokens held at once, oldest dropped first: what a server has priced and not yet run (a
# request refused after pricing, or whose client went away, leaves its encodings to age out).
# An encoding costs ~100 bytes a token, so at most a few MB; a server's queue holds far less.
HANDOFF_TOKENS = 65_536


class PricedEncodings:
    """Encodings by key (truncation setting, text, pair), each taken once, by the first call
    that asks for its key; at most `limit` tokens kept."""

    def __init__(self, limit: int = HANDOFF_TOKENS):
        self.limit = limit
        self._kept: OrderedDict[Hashable, object] = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()
        self._local = threading.local()   # pricing is per thread: a call running beside takes

    @contextmanager
    def pricing(self):
        """Within it, on this thread, what `through` makes is kept for the call to come."""
        with self._mode("price"):
            yield

    @contextmanager
    def reading(self):
        """Within it, on this thread, `through` reads kept encodings without taking them and
        keeps nothing: a check of what was priced (a refusal past a length) leaves them to
        the call."""
        with self._mode("read"):
            yield

    @contextmanager
    def _mode(self, mode: str):
        self._local.mode = mode
        try:
            yield
        finally:
            self._local.mode = None

    def through(self, keys: Sequence[Hashable], make: Callable[[list[int]], list]) -> list:
        """The encodings for `keys`: `make(indices)` encodes those at `indices`. While pricing,
        all are made and kept; else each kept one is taken (read, while `reading`) and only
        the rest are made."""
        mode = getattr(self._local, "mode", None)
        if mode == "price":
            encs = make(list(range(len(keys))))
            self._keep(keys, encs)
            return encs
        if not self._kept:
            encs = [None] * len(keys)
        else:
            encs = self._read(keys) if mode == "read" else self._take(keys)
        missing = [i for i, e in enumerate(encs) if e is None]
        if missing:
            for i, e in zip(missing, make(missing)):
                encs[i] = e
        return encs

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def tokens(self) -> int:
        return self._tokens

    def _keep(self, keys, encs) -> None:
        with self._lock:
            for key, enc in zip(keys, encs):
                old = self._kept.pop(key, None)
                if old is not None:
                    self._tokens -= _tokens(old)
                self._kept[key] = enc
                self._tokens += _tokens(enc)
            while self._tokens > self.limit:
                _, dropped = self._kept.popitem(last=False)
                self._tokens -= _tokens(dropped)

    def _read(self, keys) -> list:
        with self._lock:
            return [self._kept.get(key) for key in keys]

    def _take(self, keys) -> list:
        with self._lock:
            out = []
            for key in keys:
                enc = self._kept.pop(key, None)
                if enc is not None:
                    self._tokens -= _tokens(enc)
                out.append(enc)
            return out


def _tokens(enc) -> int:
    """An encoding's tokens, its overflowing windows' included (what it holds in memory)."""
    return len(enc.ids) + sum(len(w.ids) for w in getattr(enc, "overflowing", ()))
