"""zero-shot-classification: transformers 4.57 ZeroShotClassificationPipeline semantics on
onnxruntime.

    zs = load("out/nli")
    zs("the match went to extra time", candidate_labels=["sports", "politics"])
    # {"sequence": "the match ...", "labels": ["sports", "politics"], "scores": [0.97, 0.03]}

Each text is paired with `hypothesis_template` filled with each candidate label (the NLI
premise and hypothesis) and run through an NLI sequence classifier; the entailment class is the
first label whose name starts with "entail" (any case) in config.json's label2id (transformers'
`entailment_id`). multi_label False (default): a softmax of the entailment logits over the
labels; True, or one label: each label's softmax of entailment against contradiction (class 0,
or the last class when entailment is 0). Labels come back sorted by score, best first.
candidate_labels is a list or one comma-separated string; the second positional argument is
candidate_labels, as in transformers. Pairs are truncated from the text only ("only_first"), so
the hypothesis is never cut.

Deliberate differences: a model whose labels name no entailment class is refused (transformers
warns and reads the last class); a hypothesis too long to leave room for any of the text is an
error naming the label (transformers then feeds the model more tokens than it has positions);
an empty text is refused; a list of one text gives a list of one.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import ConfigError, InputError
from ..postprocess import softmax
from ..tensors import BYTES, FP32, NK, N, TaskTensors, Tensor, texts
from .base import Pipeline, Work
from .inputs import Inputs

ENTAILMENT = "entail"


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    """[N, L]: every row of one request has the same candidate labels."""
    return {"labels": np.array([r["labels"] for r in results], dtype=np.object_),
            "scores": np.array([r["scores"] for r in results], dtype=np.float32)}


def entailment_index(config: Mapping) -> int | None:
    """transformers' `entailment_id`: the first label2id entry whose label starts with
    "entail" (label2id from id2label where config.json has none)."""
    label2id = config.get("label2id")
    if not isinstance(label2id, dict) or not label2id:
        id2label = config.get("id2label") or {}
        label2id = {str(v): int(k) for k, v in sorted(id2label.items(), key=lambda x: int(x[0]))}
    for label, i in label2id.items():
        if str(label).lower().startswith(ENTAILMENT):
            return int(i)
    return None


def parse_labels(value) -> list[str]:
    """transformers' `_parse_labels`: a string is split at commas (blanks dropped)."""
    if value is None:
        raise InputError("candidate_labels is required: the labels to choose from",
                         'pass candidate_labels=["sports", "politics"] (CLI: '
                         "--candidate-labels sports,politics)", parameter="candidate_labels")
    labels = [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) \
        else list(value)
    if not labels:
        raise InputError(f"candidate_labels {value!r} names no label",
                         'pass candidate_labels=["sports", "politics"]',
                         parameter="candidate_labels")
    return labels


class ZeroShotClassificationPipeline(Pipeline):
    task = "zero-shot-classification"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),),
                          (Tensor("labels", BYTES, NK), Tensor("scores", FP32, NK)),
                          texts, _to_tensors)

    @classmethod
    def check_model(cls, config: Mapping, where: str) -> None:
        if entailment_index(config) is None:
            names = ", ".join(str(v) for v in (config.get("id2label") or {}).values())
            raise ConfigError(f"{where} is not an NLI model: none of its labels ({names or 'none'}"
                              ") starts with 'entail', so no class says a label applies",
                              "export an NLI model (entailment / neutral / contradiction), or "
                              "name its entailment class in config.json's id2label")

    def __call__(self, *args, **kwargs):
        # transformers: pipe(sequences, candidate_labels) takes the labels positionally
        if len(args) == 2 and "candidate_labels" not in kwargs:
            args, kwargs = args[:1], {**kwargs, "candidate_labels": args[1]}
        return super().__call__(*args, **kwargs)

    def _encode(self, read: Inputs, labels: list[str], template: str, warn: bool) -> list:
        """Every (text, hypothesis) pair, texts in order, each one's labels in order; the text
        alone is truncated (transformers' TruncationStrategy.ONLY_FIRST)."""
        hypotheses = [template.format(label) for label in labels]
        room = self.max_length - self.tokenizer.num_special_tokens_to_add(pair=True)
        for label, h in zip(labels, hypotheses):
            # only_first cuts the text alone: a hypothesis that fills the model leaves none
            if len(self.tokenizer.backend.encode(h, add_special_tokens=False).ids) >= room:
                raise InputError(f"the hypothesis for label {label!r} ({h!r}) leaves no room "
                                 f"for the text in the model's {self.max_length} tokens",
                                 "shorten the label or hypothesis_template",
                                 parameter="candidate_labels")
        pairs = [(t, h) for t in read.records for h in hypotheses]
        encs = self.backend(self.max_length, 0, "only_first").encode_batch(pairs) if pairs else []
        if warn:
            self.warn_truncated(encs)
        return encs

    def estimate(self, inputs: Inputs, **params) -> Work:
        labels = parse_labels(params["candidate_labels"])
        encs = self._encode(inputs, labels, params["hypothesis_template"], warn=False)
        return Work(sum(len(e.ids) for e in encs))

    def predict(self, read: Inputs, candidate_labels, hypothesis_template, multi_label,
                batch_size):
        labels = parse_labels(candidate_labels)
        encs = self._encode(read, labels, hypothesis_template, warn=True)
        rows = self.infer(encs, lambda batch, out: list(out["logits"]), batch_size)
        entail = entailment_index(self.folder.config)
        results = []
        for i, text in enumerate(read.records):
            logits = np.asarray(rows[i * len(labels):(i + 1) * len(labels)], np.float32)  # (k, C)
            if multi_label or len(labels) == 1:
                contradiction = -1 if entail == 0 else 0
                scores = softmax(logits[:, [contradiction, entail]])[:, 1]
            else:
                scores = softmax(logits[:, entail])
            # transformers: list(reversed(scores.argsort())) — for its few labels numpy sorts
            # stably, so equal scores come out in reverse label order
            order = np.argsort(scores, kind="stable")[::-1]
            results.append({"sequence": text, "labels": [labels[j] for j in order],
                            "scores": scores[order].tolist()})
        return self.unwrap(results, read)
