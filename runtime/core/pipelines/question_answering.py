"""question-answering: transformers 4.57 QuestionAnsweringPipeline semantics on onnxruntime.

Arguments: question/context (str, or lists), or one dict / a list of {"question", "context"}
dicts; top_k (1), doc_stride (min(max_seq_len // 2, 128)), max_answer_len (15), max_seq_len
(min(model max, 384)), max_question_len (64), handle_impossible_answer (False), align_to_words
(True). A long context is split into windows of max_seq_len tokens overlapping by doc_stride
(the tokenizers library's own overflow, as transformers uses); each window is softmax-normalised
on its own, spans score P(start)·P(end), answers carry character offsets into the original
context, and answers with the same text (case-insensitive) are merged by adding their scores.

Where bertonnx deliberately differs from transformers 4.57, and why:
- top_k answers whenever the context holds that many distinct valid spans. transformers takes a
  fixed pool per window (2·top_k + 10) before merging duplicates (its fix for issues 26286 and
  38984) and may still come up short; we start from the same pool — so results are identical
  whenever its pool suffices — and widen it only when merging left fewer than top_k answers.
- Spans that end before they start, or start on [CLS], are never candidates. transformers'
  `decode_spans` can return them with score 0 when a context has fewer spans than the pool.
- top_k=1 returns a dict and top_k>1 a list, always (transformers returns a dict whenever one
  answer is left); a list of inputs returns a list, even of one.
- A question longer than max_question_len tokens is an error: transformers' fast path ignores
  max_question_len and its slow path truncates the question silently.
- max_seq_len above the model's limit and doc_stride ≥ the context room of a window are clear
  errors (transformers fails inside onnx/torch or panics in the tokenizer).
"""
from __future__ import annotations

import numpy as np

from ..batches import pad_rows
from ..errors import InputError
from ..postprocess import (
    qa_best_spans,
    qa_probabilities,
    valid_span_counts,
    word_char_spans,
)
from ..tensors import BYTES, FP32, INT64, N, TaskTensors, Tensor, column
from .base import Pipeline, Work, unpadded
from .windows import Windows
from .inputs import Inputs, QAInput, check_text, row_field


def _from_tensors(tensors: dict, pipe) -> list:
    return [{"question": q, "context": c}
            for q, c in zip(tensors["question"], tensors["context"])]


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"answer": column(results, "answer", np.object_),
            "score": column(results, "score", np.float32),
            "start": column(results, "start", np.int64),
            "end": column(results, "end", np.int64)}

class QuestionAnsweringPipeline(Pipeline):
    task = "question-answering"
    # the best span per question over /v2 (its record keeps top_k off it): rows stay even
    tensors = TaskTensors(task, (Tensor("question", BYTES, N), Tensor("context", BYTES, N)),
                          (Tensor("answer", BYTES, N), Tensor("score", FP32, N),
                           Tensor("start", INT64, N), Tensor("end", INT64, N)),
                          _from_tensors, _to_tensors)
    input_keywords = ("question", "context")

    input_hint = '{"question": "...", "context": "..."} or a list of such objects'

    @classmethod
    def read_inputs(cls, *args, question=None, context=None) -> Inputs:
        """Every accepted call form → one QAInput per input: a {"question", "context"} dict or
        a list of them; (question, context) positionally; question=/context= as strings, a
        list of questions on one context, or two lists of the same length."""
        if len(args) == 1 and isinstance(args[0], Inputs) and question is context is None:
            return args[0]
        examples, single = cls._examples(args, question, context)
        for i, (q, c) in enumerate(examples):
            where = "" if single else f" of input #{i}"
            check_text(q, f"the question{where}", index=i)
            check_text(c, f"the context{where}", index=i)
        return Inputs(tuple(QAInput(q, c) for q, c in examples), single,
                      "dict" if single else "list")

    row_fields = QAInput._fields

    @classmethod
    def input_of_row(cls, row) -> dict:
        return {name: row_field(row, name) for name in cls.row_fields}

    @classmethod
    def is_json_input(cls, x, in_list: bool = False) -> bool:
        """A {"question", "context"} object, those two keys only."""
        return (isinstance(x, dict) and set(x) == set(QAInput._fields)
                and all(isinstance(v, str) for v in x.values()))

    @staticmethod
    def _examples(args, question, context) -> tuple[list[tuple[str, str]], bool]:
        """Normalise every accepted call form to [(question, context)], single?"""
        if args:
            if question is not None or context is not None:
                raise InputError("pass the inputs either positionally or as question=/context=",
                                 "not both")
            if len(args) == 2 and all(isinstance(a, str) for a in args):
                question, context = args
            elif len(args) == 1:
                items, single = args[0], isinstance(args[0], dict)
                items = [items] if single else items
                if not isinstance(items, (list, tuple)):
                    raise InputError(f"cannot answer from a {type(args[0]).__name__}",
                                     'pass {"question": ..., "context": ...} or a list of them')
                pairs = []
                for i, it in enumerate(items):
                    if not isinstance(it, dict) or "question" not in it or "context" not in it:
                        raise InputError(f"input #{i} is not a {{question, context}} dict",
                                         'pass {"question": ..., "context": ...}', index=i)
                    pairs.append((it["question"], it["context"]))
                return pairs, single
            else:
                raise InputError("cannot understand the positional arguments",
                                 "pass question=... and context=...")
        if question is None or context is None:
            raise InputError("both a question and a context are needed",
                             "pass question=... and context=...")
        if isinstance(question, str) and isinstance(context, str):
            return [(question, context)], True
        if isinstance(question, list) and isinstance(context, str):
            return [(q, context) for q in question], False
        if isinstance(question, list) and isinstance(context, list):
            if len(question) != len(context):
                raise InputError(f"{len(question)} questions but {len(context)} contexts",
                                 "pass one context per question")
            return list(zip(question, context)), False
        raise InputError("question and context must be strings or lists of strings",
                         "pass question=str|list, context=str|list")

    def predict(self, read: Inputs, top_k, doc_stride, max_answer_len, max_seq_len,
                max_question_len, handle_impossible_answer, align_to_words, batch_size):
        max_seq_len, doc_stride = self._lengths(max_seq_len, doc_stride)
        windows = self._windows(read, max_seq_len, doc_stride, max_question_len)
        logits = self.infer(windows.encodings, lambda batch, out: list(zip(
            unpadded(batch, out["start_logits"]), unpadded(batch, out["end_logits"]))),
            batch_size)
        results = []
        for i, (record, encs, rows) in enumerate(zip(read.records,
                                                     windows.per_input(windows.encodings),
                                                     windows.per_input(logits))):
            starts, ends = zip(*rows)
            results.append(self._answers(i, record.context, encs, starts, ends, top_k,
                                         max_answer_len, handle_impossible_answer,
                                         align_to_words))
        return self.unwrap(results, read)

    def _lengths(self, max_seq_len, doc_stride) -> tuple[int, int]:
        """max_seq_len and doc_stride with their defaults filled in."""
        if max_seq_len is None:
            max_seq_len = min(self.max_length, 384)
        if doc_stride is None:
            doc_stride = min(max_seq_len // 2, 128)
        return max_seq_len, doc_stride

    def _rooms(self, read: Inputs, max_seq_len, doc_stride, max_question_len) -> list[int]:
        """The context tokens each input's windows hold, each input checked to have room for
        some context beside its question (InputError naming the input otherwise)."""
        q_lens = [len(e.ids) for e in self.tokenizer.backend.encode_batch(
            [r.question for r in read.records], add_special_tokens=False)]
        rooms = []
        for i, n in enumerate(q_lens):
            where = "the question" if read.single else f"the question of input #{i}"
            if n > max_question_len:
                raise InputError(f"{where} has {n} tokens, more than max_question_len="
                                 f"{max_question_len}",
                                 "shorten the question or raise max_question_len", index=i)
            # [CLS] q [SEP] c [SEP] (BERT), <s> q </s></s> c </s> (RoBERTa)
            room = max_seq_len - n - self.tokenizer.num_special_tokens_to_add(True)
            if room < 1:
                raise InputError(f"{where} ({n} tokens) leaves no room for the context in "
                                 f"max_seq_len={max_seq_len}", "shorten the question", index=i)
            if doc_stride >= room:
                raise InputError(f"doc_stride={doc_stride} must be smaller than the {room} "
                                 f"context tokens a window holds next to {where}",
                                 "lower doc_stride or raise max_seq_len", index=i)
            rooms.append(room)
        return rooms

    def _windows(self, read: Inputs, max_seq_len, doc_stride, max_question_len) -> Windows:
        """All windows of all inputs, checked to hold the question and some of the context."""
        self._rooms(read, max_seq_len, doc_stride, max_question_len)
        return self.encode_windows(list(read.records), max_seq_len, doc_stride, "only_second")

    @classmethod
    def windowed_chars(cls, inputs: Inputs) -> int:
        return sum(len(r.context) for r in inputs.records)

    def estimate(self, inputs: Inputs, top_k, doc_stride, max_seq_len, max_question_len,
                 **_) -> Work:
        """Tokens: every window at its full length (a window of `room` context tokens steps
        by room - doc_stride, so a doc_stride near the room multiplies the windows);
        answers: top_k per input."""
        max_seq_len, doc_stride = self._lengths(max_seq_len, doc_stride)
        rooms = self._rooms(inputs, max_seq_len, doc_stride, max_question_len)
        contexts = self.tokenizer.backend.encode_batch([r.context for r in inputs.records],
                                                       add_special_tokens=False)
        tokens = 0
        for i, (room, c) in enumerate(zip(rooms, contexts)):
            n = len(c.ids)
            if n == 0:
                raise _no_context(i)
            windows = 1 + max(0, -(-(n - room) // (room - doc_stride)))
            tokens += windows * (max_seq_len - room + min(room, n))
        return Work(tokens, top_k * len(inputs))

    def _answers(self, index, context_text, windows, start_logits, end_logits, top_k,
                 max_answer_len, handle_impossible, align_to_words):
        # the windows' token facts as (W, T) arrays, right-padded like the batches
        ids = pad_rows([w.ids for w in windows], -1)
        # the second sequence's tokens: by sequence ids, since RoBERTa-like families give
        # every token type 0 (-1 marks specials and padding)
        second = pad_rows([[-1 if q is None else q for q in w.sequence_ids] for w in windows], -1)
        special = pad_rows([w.special_tokens_mask for w in windows], True, dtype=bool)
        words = pad_rows([w.word_ids for w in windows], np.nan, dtype=np.float64)  # None → nan
        offsets = pad_rows([w.offsets for w in windows], 0)                      # (W, T, 2)
        S = pad_rows(start_logits, 0, dtype=np.float32)
        E = pad_rows(end_logits, 0, dtype=np.float32)
        context = (second == 1) & ~special          # the context's own tokens
        if not context.any():
            raise _no_context(index)
        # transformers keeps [CLS] in the softmax (p_mask 0) but never as an answer end
        allowed = context | (ids == self.tokenizer.cls_token_id)
        start, end, null = qa_probabilities(S, E, allowed)
        if align_to_words:
            word_start, word_end = word_char_spans(np.nan_to_num(words, nan=-1).astype(np.int64),
                                                   offsets, context)
        else:
            word_start, word_end = offsets[..., 0], offsets[..., 1]
        per_window = valid_span_counts(context, max_answer_len)
        k = top_k * 2 + 10 if align_to_words else top_k
        want = top_k - (1 if handle_impossible else 0)
        while True:
            win, s, e, scores = qa_best_spans(start, end, context, max_answer_len, k)
            answers = _merge(context_text, word_start[win, s], word_end[win, e], scores)
            if len(answers) >= want or k >= per_window.max():
                break
            k *= 2   # duplicates ate the pool: look deeper (transformers stops here)
        if handle_impossible:
            answers.append({"score": float(null.min()), "start": 0, "end": 0, "answer": ""})
        answers.sort(key=lambda a: a["score"], reverse=True)
        answers = answers[:top_k]
        return answers[0] if top_k == 1 else answers


def _no_context(index: int) -> InputError:
    return InputError("the context has no text the tokenizer keeps", "pass a real context",
                      index=index)


def _merge(text: str, char_starts, char_ends, scores) -> list[dict]:
    """Candidates in visiting order → answers; the same text (any case) adds its score to the
    first occurrence, which keeps its offsets (transformers' get_answer)."""
    answers: list[dict] = []
    seen: dict[str, dict] = {}
    for cs, ce, sc in zip(char_starts.tolist(), char_ends.tolist(), scores.tolist()):
        ans = text[cs:ce]
        key = ans.lower()
        if key in seen:
            seen[key]["score"] += sc
        else:
            seen[key] = {"score": sc, "start": cs, "end": ce, "answer": ans}
            answers.append(seen[key])
    return answers
