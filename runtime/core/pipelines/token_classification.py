"""token-classification: transformers 4.57 TokenClassificationPipeline semantics on onnxruntime.

aggregation_strategy none → one {entity, score, index, word, start, end} per token;
simple/first/average/max → {entity_group, score, word, start, end}, grouped as transformers
does (B-/I- tags; first/average/max first force one label per word). ignore_labels defaults to
["O"]. stride: windows overlapping by that many tokens, merged as transformers merges them.
Deliberate difference: a text longer than the model is windowed (stride
min(room // 2, 128) unless given) instead of silently truncated, for every strategy including
"none", where `index` then counts tokens in the whole text ([CLS] = 0) as it does for short ones.
"""
from __future__ import annotations

import json
import logging

import numpy as np

from ..postprocess import (
    aggregate_words,
    entity_groups,
    group_means,
    merge_overlapping,
    softmax,
    word_groups,
)
from ..tensors import BYTES, N, TaskTensors, Tensor, jsonable, texts
from .base import Pipeline, Work, unpadded
from .inputs import Inputs

log = logging.getLogger("bertonnx")


def _tag(label: str) -> tuple[bool, str]:
    """(is B-, tag) as transformers' get_tag: B-X and I-X share tag X; others are their own."""
    if label.startswith("B-"):
        return True, label[2:]
    if label.startswith("I-"):
        return False, label[2:]
    return False, label


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    """/v2: each text's entities as one JSON string (their number varies by text)."""
    return {"entities": np.array([json.dumps(r, default=jsonable, ensure_ascii=False)
                                  for r in results], np.object_)}

class TokenClassificationPipeline(Pipeline):
    task = "token-classification"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("entities", BYTES, N),),
                          texts, _to_tensors)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        id2label = self.folder.id2label
        n = max(id2label) + 1 if id2label else 0
        self.labels = [id2label.get(i, f"LABEL_{i}") for i in range(n)]
        tags = [_tag(lab) for lab in self.labels]
        names = sorted({t for _, t in tags})
        self._is_begin = np.array([b for b, _ in tags], dtype=bool)
        self._tag_ids = np.array([names.index(t) for _, t in tags], dtype=np.int64)
        # the group's name: transformers splits at the first "-" whatever the prefix
        self._group_names = [lab.split("-", 1)[-1] for lab in self.labels]

    @property
    def room(self) -> int:
        """Text tokens a window holds (the model's length less [CLS] and [SEP])."""
        return self.max_length - self.tokenizer.num_special_tokens_to_add(False)

    def _stride(self, stride) -> int:
        return min(self.room // 2, 128) if stride is None else stride

    @classmethod
    def windowed_chars(cls, inputs: Inputs) -> int:
        return sum(map(len, inputs.records))

    def estimate(self, inputs: Inputs, stride, **_) -> Work:
        """Tokens: every window of every text at its length (windows step by room - stride)."""
        room, stride = self.room, self._stride(stride)
        tokens = 0
        for e in self.tokenizer.backend.encode_batch(list(inputs.records),
                                                     add_special_tokens=False):
            n = len(e.ids)
            windows = 1 + max(0, -(-(n - room) // (room - stride)))
            tokens += windows * (self.max_length - room + min(room, n))
        return Work(tokens)

    def predict(self, read: Inputs, aggregation_strategy, ignore_labels, stride, batch_size):
        strategy = aggregation_strategy.lower()
        ignore = {"O"} if ignore_labels is None else set(ignore_labels)
        if strategy in ("first", "average", "max") and not self.tokenizer.continuing_subword_prefix:
            log.warning("the %s tokenizer does not mark sub-words: words are told apart by the "
                        "spaces in the text (transformers' fallback heuristic)",
                        self.tokenizer.family)
        room, stride = self.room, self._stride(stride)
        windows = self.encode_windows(list(read.records), self.max_length, stride)
        probs = self.infer(windows.encodings,
                           lambda batch, out: unpadded(batch, softmax(out["logits"])), batch_size)
        results = []
        for text, encs, parts, rows in zip(read.records, windows.per_input(windows.encodings),
                                           windows.per_input(windows.part),
                                           windows.per_input(probs)):
            # a window's first token is token j·(room − stride) of the whole text
            per_window = [self._window_entities(text, enc, p, strategy, ignore,
                                                int(j) * (room - stride))
                          for enc, j, p in zip(encs, parts, rows)]
            results.append(self._merge_windows(per_window, len(encs)))
        return self.unwrap(results, read)

    def _window_entities(self, text, enc, probs, strategy, ignore, first_token) -> list[dict]:
        keep = np.flatnonzero(~np.asarray(enc.special_tokens_mask, dtype=bool))
        if len(keep) == 0:
            return []
        scores = probs[keep]                                               # (N, L)
        ids = np.asarray(enc.ids)[keep]
        off = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)[keep]
        tokens = [enc.tokens[i] for i in keep]
        if self.tokenizer.continuing_subword_prefix:
            # a sub-word's token text is longer than its span ("##ing" vs "ing"), as
            # transformers tests
            tok_len = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
            is_subword = tok_len != (off[:, 1] - off[:, 0])
        else:
            # BPE / Unigram (Ġ, ▁) have no sub-word marker: transformers' fallback, a token
            # continues a word when no space touches its start in the text
            is_subword = np.array([a > 0 and " " not in text[a - 1:a + 1] for a in off[:, 0]],
                                  dtype=bool)
        unk = ids == self.tokenizer.unk_token_id
        is_subword[unk] = False
        for i in np.flatnonzero(unk):  # [UNK] shows the text it stands for
            tokens[i] = text[off[i, 0]:off[i, 1]]
        if strategy in ("none", "simple"):
            labels = scores.argmax(-1)
            best = scores[np.arange(len(labels)), labels]
            if strategy == "none":
                return [{"entity": self.labels[lab], "score": float(s), "index": int(k + first_token),
                         "word": tok, "start": int(a), "end": int(b)}
                        for lab, s, k, tok, (a, b) in zip(labels, best, keep, tokens, off)
                        if self.labels[lab] not in ignore]
            words, starts, ends = tokens, off[:, 0], off[:, 1]
        else:
            w0 = word_groups(is_subword)
            w1 = np.r_[w0[1:], len(tokens)]
            labels, best = aggregate_words(scores, w0, strategy)
            words = [self.tokens_to_string(tokens[a:b]) for a, b in zip(w0, w1)]
            starts, ends = off[w0, 0], off[w1 - 1, 1]
        g0 = entity_groups(labels, self._is_begin, self._tag_ids)
        g1 = np.r_[g0[1:], len(labels)]
        means = group_means(best.astype(np.float64), g0)
        out = []
        for a, b, s in zip(g0, g1, means):
            name = self._group_names[labels[a]]
            if name in ignore:
                continue
            out.append({"entity_group": name, "score": float(s),
                        "word": self.tokens_to_string(words[a:b]),
                        "start": int(starts[a]), "end": int(ends[b - 1])})
        return out

    @staticmethod
    def _merge_windows(per_window: list[list[dict]], n_windows: int) -> list[dict]:
        ents = [e for win in per_window for e in win]
        if n_windows <= 1 or not ents:
            return ents
        keep = merge_overlapping(np.array([e["start"] for e in ents]),
                                 np.array([e["end"] for e in ents]),
                                 np.array([e["score"] for e in ents]))
        return [ents[i] for i in keep]
