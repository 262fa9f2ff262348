"""text-classification: transformers 4.57 TextClassificationPipeline semantics on onnxruntime.

Inputs: a text, a {"text", "text_pair"} dict, or a list of those (a [text, pair] list item is
a pair too). top_k: left out → transformers' legacy shape (a str gives [best], a list gives one
best dict per input, a dict gives the best dict); an int → that many sorted dicts per input;
None → every label. function_to_apply default/sigmoid/softmax/none, the default following
problem_type and num_labels. Labels come from config.json's id2label.
Deliberate differences: over-long texts are truncated (longest first for pairs) with a
warning rather than failing; a list of one input still gives a list.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..postprocess import FUNCTIONS, classification_scores, default_function
from .base import Pipeline, check_text


class _Legacy:
    def __repr__(self) -> str:
        return "<best label only>"


LEGACY = _Legacy()  # top_k not given: transformers' pre-top_k output shape


class TextClassificationPipeline(Pipeline):
    task = "text-classification"

    @property
    def labels(self) -> list[str]:
        id2label = self.folder.id2label
        n = self.num_labels
        return [id2label.get(i, f"LABEL_{i}") for i in range(n)]

    @property
    def num_labels(self) -> int:
        return len(self.folder.id2label) or int(self.folder.config.get("num_labels", 2))

    def _inputs(self, inputs) -> tuple[list[str], list, str]:
        """(texts, pairs with None for singles, kind) with kind str | dict | list."""
        kind = "str" if isinstance(inputs, str) else "dict" if isinstance(inputs, dict) else "list"
        items = [inputs] if kind != "list" else inputs
        if not isinstance(items, (list, tuple)):
            raise InputError(f"cannot classify a {type(inputs).__name__}",
                             'pass a str, a {"text", "text_pair"} dict or a list of them')
        texts, pairs = [], []
        for i, item in enumerate(items):
            where = "the input" if kind != "list" else f"input #{i}"
            if isinstance(item, dict):
                if "text" not in item or set(item) - {"text", "text_pair"}:
                    raise InputError(f"{where} has keys {sorted(item)}",
                                     'use {"text": ..., "text_pair": ...}')
                text, pair = item["text"], item.get("text_pair")
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                text, pair = item
            else:
                text, pair = item, None
            check_text(text, where)
            if pair is not None:
                check_text(pair, f"the text_pair of {where}")
            texts.append(text)
            pairs.append(pair)
        return texts, pairs, kind

    def __call__(self, inputs, top_k=LEGACY, function_to_apply: str | None = None,
                 batch_size: int | None = None):
        if function_to_apply in (None, "default"):
            fn = default_function(self.folder.config.get("problem_type"), self.num_labels)
        elif isinstance(function_to_apply, str) and function_to_apply.lower() in FUNCTIONS:
            fn = function_to_apply.lower()
        else:
            raise InputError(f"unknown function_to_apply {function_to_apply!r}",
                             f"use one of {', '.join(FUNCTIONS)}")
        legacy = top_k is LEGACY
        if not legacy and top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise InputError(f"top_k must be a positive integer or None, got {top_k!r}",
                             "pass top_k ≥ 1, or None for every label")
        texts, pairs, kind = self._inputs(inputs)
        encs = self._encode_mixed(texts, pairs)
        labels = self.labels
        results: list = [None] * len(texts)
        for batch, out in self.run(encs, batch_size):
            scores = classification_scores(out["logits"], fn)             # (B, L)
            order = np.argsort(-scores, axis=-1, kind="stable")
            for row, i in enumerate(batch.index):
                s = scores[row]
                if legacy:
                    best = int(order[row, 0])
                    results[i] = {"label": labels[best], "score": float(s[best])}
                else:
                    top = order[row] if top_k is None else order[row, :top_k]
                    results[i] = [{"label": labels[j], "score": float(s[j])} for j in top]
        if kind == "list":
            return results
        if legacy and kind == "str":
            return [results[0]]
        return results[0]

    def _encode_mixed(self, texts, pairs):
        """One tokenizer call takes all singles or all pairs; a mixed list takes two."""
        if all(p is None for p in pairs):
            return self.encode(texts)
        if all(p is not None for p in pairs):
            return self.encode(texts, pairs)
        encs: list = [None] * len(texts)
        single = [i for i, p in enumerate(pairs) if p is None]
        double = [i for i, p in enumerate(pairs) if p is not None]
        for idx, got in ((single, self.encode([texts[i] for i in single])),
                         (double, self.encode([texts[i] for i in double],
                                              [pairs[i] for i in double]))):
            for i, e in zip(idx, got):
                encs[i] = e
        return encs
