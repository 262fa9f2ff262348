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

from ..cross_encoder import read_cross_encoder
from ..errors import ConfigError, InputError
from ..postprocess import classification_scores, default_function
from ..tasks import FUNCTIONS, LEGACY
from ..tensors import BYTES, FP32, N, TaskTensors, Tensor, column
from .base import Pipeline
from .inputs import Inputs, TextPair, check_text, row_field


def _from_tensors(tensors: dict, pipe) -> list:
    """/v2: a text, or {"text", "text_pair"} where text_pair is given and its element not
    empty (a BYTES tensor holds no nulls: "" marks a row without a pair)."""
    pairs = tensors.get("text_pair") or [""] * len(tensors["text"])
    return [{"text": t, "text_pair": p} if p else t for t, p in zip(tensors["text"], pairs)]


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"label": column(results, "label", np.object_),
            "score": column(results, "score", np.float32)}

class TextClassificationPipeline(Pipeline):
    task = "text-classification"
    # one best label per text over /v2 (its record keeps top_k off it): rows stay even
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),
                                 Tensor("text_pair", BYTES, N, optional=True)),
                          (Tensor("label", BYTES, N), Tensor("score", FP32, N)),
                          _from_tensors, _to_tensors)

    @classmethod
    def folder_defaults(cls, path) -> dict:
        """A CrossEncoder folder of several labels (runtime/core/cross_encoder.py): its
        activation as the scores' function, so a pair's scores are CrossEncoder.predict's."""
        ce = read_cross_encoder(path)
        if ce is None:
            return {}
        function = {"identity": "none", "sigmoid": "sigmoid", "softmax": "softmax"}.get(
            ce.activation)
        if function is None:
            raise ConfigError(f"{path}: the CrossEncoder's activation {ce.activation} is not a "
                              f"function_to_apply ({', '.join(FUNCTIONS[1:])})",
                              "set its activation_fn to Identity and apply yours to the scores")
        return {"function_to_apply": function}

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
    def unwrap(cls, results, inputs: Inputs, **params):
        """transformers' shape: a lone str without top_k gives [best] ("This pipeline is odd"
        in its __call__), a lone dict the best dict, a list one result per input."""
        if not inputs.single:
            return results
        if cls.spec.complete(params)["top_k"] is LEGACY and inputs.form == "str":
            return [results[0]]
        return results[0]

    @classmethod
    def per_input(cls, answer, inputs: Inputs, **params) -> list:
        legacy = cls.spec.complete(params)["top_k"] is LEGACY
        if inputs.single and legacy and inputs.form == "str":
            return answer   # already [best]
        return super().per_input(answer, inputs)

    def predict(self, read: Inputs, top_k, function_to_apply, batch_size):
        fn = (function_to_apply or "default").lower()
        if fn == "default":
            fn = default_function(self.folder.config.get("problem_type"), self.num_labels)
        legacy = top_k is LEGACY
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
