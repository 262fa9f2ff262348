"""text-classification: transformers 4.57 TextClassificationPipeline semantics on onnxruntime.

Inputs (`read_inputs`): a text, a {"text", "text_pair"} dict, or a list of those (a [text,
pair] list item is a pair too). top_k: left out → transformers' legacy shape (a str gives [best], a list gives one
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
from .base import Pipeline, row_field
from .inputs import Inputs, TextPair, check_text
from .parameters import Rule, choice, integer


class _Legacy:
    def __repr__(self) -> str:
        return "<best label only>"

    def __reduce__(self):  # unpickled (a Ray actor's parameters) as the one LEGACY, not a copy
        return "LEGACY"


LEGACY = _Legacy()  # top_k not given: transformers' pre-top_k output shape
_TOP_K = integer(1)


class TextClassificationPipeline(Pipeline):
    task = "text-classification"
    PARAMETERS = {
        **Pipeline.PARAMETERS,
        # left out: the best label in transformers' legacy shape; None (null): every label
        "top_k": Rule(lambda v, pipe: None if v is LEGACY or v is None or _TOP_K.ok(v, pipe)
                      is None else "a positive integer, or null for every label", "2"),
        "function_to_apply": choice(FUNCTIONS, none=True, fold_case=True)}

    @property
    def labels(self) -> list[str]:
        id2label = self.folder.id2label
        n = self.num_labels
        return [id2label.get(i, f"LABEL_{i}") for i in range(n)]

    @property
    def num_labels(self) -> int:
        return len(self.folder.id2label) or int(self.folder.config.get("num_labels", 2))

    input_hint = 'a text, {"text": "...", "text_pair": "..."}, or a list of those'

    @classmethod
    def read_inputs(cls, inputs) -> Inputs:
        """A text, a {"text", "text_pair"} dict, or a list of texts, dicts and [text, pair]
        lists → one TextPair per input; form "str", "dict" or "list"."""
        if isinstance(inputs, Inputs):
            return inputs
        form = "str" if isinstance(inputs, str) else "dict" if isinstance(inputs, dict) else "list"
        items = [inputs] if form != "list" else inputs
        if not isinstance(items, (list, tuple)):
            raise InputError(f"cannot classify a {type(inputs).__name__}",
                             'pass a str, a {"text", "text_pair"} dict or a list of them')
        records = []
        for i, item in enumerate(items):
            where = "the input" if form != "list" else f"input #{i}"
            if isinstance(item, dict):
                if "text" not in item or set(item) - {"text", "text_pair"}:
                    raise InputError(f"{where} has keys {sorted(item)}",
                                     'use {"text": ..., "text_pair": ...}', index=i)
                text, pair = item["text"], item.get("text_pair")
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                text, pair = item
            else:
                text, pair = item, None
            check_text(text, where, index=i)
            if pair is not None:
                check_text(pair, f"the text_pair of {where}", index=i)
            records.append(TextPair(text, pair))
        return Inputs(tuple(records), form != "list", form)

    row_fields = TextPair._fields

    @classmethod
    def input_of_row(cls, row) -> dict:
        """{"text"} or {"text", "text_pair"}: a row without a pair (or a null one) is a text."""
        pair = row.get("text_pair")
        return {"text": row_field(row, "text"), **({} if pair is None else {"text_pair": pair})}

    @classmethod
    def is_json_input(cls, x, in_list: bool = False) -> bool:
        """A text, a {"text", "text_pair"} object; in a list also a [text, pair] list."""
        if isinstance(x, dict):
            return ("text" in x and set(x) <= set(TextPair._fields)
                    and all(isinstance(v, str) for v in x.values()))
        if in_list and isinstance(x, list):
            return len(x) == 2 and all(isinstance(v, str) for v in x)
        return isinstance(x, str)

    @classmethod
    def unwrap(cls, results, inputs: Inputs, top_k=LEGACY, **params):
        """transformers' shape: a lone str without top_k gives [best] ("This pipeline is odd"
        in its __call__), a lone dict the best dict, a list one result per input."""
        if not inputs.single:
            return results
        if top_k is LEGACY and inputs.form == "str":
            return [results[0]]
        return results[0]

    @classmethod
    def per_input(cls, answer, inputs: Inputs, top_k=LEGACY, **params) -> list:
        if inputs.single and top_k is LEGACY and inputs.form == "str":
            return answer   # already [best]
        return super().per_input(answer, inputs)

    def __call__(self, inputs, top_k=LEGACY, function_to_apply: str | None = None,
                 batch_size: int | None = None):
        self.check_parameters(top_k=top_k, function_to_apply=function_to_apply,
                              batch_size=batch_size)
        fn = (function_to_apply or "default").lower()
        if fn == "default":
            fn = default_function(self.folder.config.get("problem_type"), self.num_labels)
        legacy = top_k is LEGACY
        read = self.read_inputs(inputs)
        encs = self.encode([r.text for r in read.records], [r.text_pair for r in read.records])
        labels = self.labels

        def post(batch, out):
            scores = classification_scores(out["logits"], fn)             # (B, L)
            order = np.argsort(-scores, axis=-1, kind="stable")
            if legacy:
                return [{"label": labels[j], "score": float(s[j])}
                        for s, j in zip(scores, order[:, 0].tolist())]
            top = order if top_k is None else order[:, :top_k]
            return [[{"label": labels[j], "score": float(s[j])} for j in t]
                    for s, t in zip(scores, top.tolist())]

        return self.unwrap(self.infer(encs, post, batch_size), read, top_k=top_k)
