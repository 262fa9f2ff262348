"""Fine-tuning data: readers that validate every record before training starts, and the
features (padded int64 tensors) each task trains on.

- text classification: CSV (header row) or JSONL with `text`, optional `text_pair`, `label`;
  labels are collected into id2label (sorted, so the mapping does not depend on file order).
- token classification: JSONL with `tokens` (words) and `tags`; only each word's first piece
  carries its tag, the others IGNORE (transformers' run_ner default).
- question answering: SQuAD v1.1/v2.0 JSON; contexts cut into windows of max_seq_len with
  `doc_stride` tokens of overlap (HF's meaning of the flag); a window that does not contain the
  answer, and every unanswerable question, points at [CLS] (BERT's SQuAD 2.0 recipe).
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertonnx.runtime.core.batches import Padded, pad_batch, pad_encodings, pad_rows
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tokenizer import WordPieceTokenizer

from ..losses import IGNORE


def read_text(path: Path) -> str:
    if not path.is_file():
        raise InputError(f"data file {path} does not exist", "check the path")
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 ({e.reason} at byte {e.start})",
                         "convert it to UTF-8") from e


def read_records(path: Path) -> list[dict]:
    """Rows of a CSV (with header) or JSON-lines file, chosen by the suffix."""
    text = read_text(path)
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path} line {n} is not JSON ({e.msg})",
                                 "write one JSON object per line") from e
            if not isinstance(row, dict):
                raise InputError(f"{path} line {n} is not a JSON object", "write objects")
            rows.append(row)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise InputError(f"{path} holds no records", "add data")
    return rows


def _pad(seqs: list[list[int]], value: int, T: int) -> torch.Tensor:
    """Rows right-padded with `value` (or cut) to T, as int64 (runtime/core/batches.py's builder)."""
    return torch.from_numpy(pad_rows(seqs, value, width=T))


def _inputs(p: Padded) -> dict:
    """The model's three inputs, as torch tensors (the arrays' memory, no copy)."""
    return {name: torch.from_numpy(a) for name, a in p.feeds().items()}


def _features(encs, T: int, pad_id: int) -> dict:
    # the tokenizer pads nothing (runtime/core/tokenizer.py), so each row's mask is all ones
    return _inputs(pad_encodings(encs, pad_id, width=T))


def _truncate(tok: WordPieceTokenizer, T: int):
    tok.backend.enable_truncation(T, strategy="longest_first")


# -- text classification --------------------------------------------------------------------
@dataclass
class ClassificationData:
    texts: list[str]
    pairs: list[str | None] | None   # None: no record has a text_pair
    labels: list[str]


def read_classification(path: Path) -> ClassificationData:
    rows = read_records(path)
    texts, pairs, labels = [], [], []
    for n, row in enumerate(rows, 1):
        text, label = row.get("text"), row.get("label")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{path} record {n} has no text", "give every record a 'text'")
        if label is None or str(label).strip() == "":
            raise InputError(f"{path} record {n} has no label",
                             "give every record a 'label' (column or key)")
        texts.append(text)
        labels.append(str(label).strip())
        # decided per record: a file may mix single texts and (text, text_pair) records
        pair = row.get("text_pair")
        pairs.append(None if pair is None or str(pair) == "" else str(pair))
    return ClassificationData(texts, pairs if any(p is not None for p in pairs) else None,
                              labels)


def label_order(labels: list[str]) -> list[str]:
    """Sorted label names; numerically when they are all integers (so '10' follows '9')."""
    uniq = set(labels)
    if all(x.lstrip("-").isdigit() for x in uniq):
        return sorted(uniq, key=int)
    return sorted(uniq)


def classification_features(data: ClassificationData, tok, T: int, label2id: dict) -> dict:
    _truncate(tok, T)
    try:
        encs = tok.encode_batch(data.texts, data.pairs)
    finally:
        tok.backend.no_truncation()
    feats = _features(encs, T, tok.pad_token_id)
    feats["labels"] = torch.tensor([label2id[x] for x in data.labels])
    return feats


# -- token classification -------------------------------------------------------------------
@dataclass
class TokenData:
    tokens: list[list[str]]
    tags: list[list[str]]


def read_token_classification(path: Path) -> TokenData:
    rows = read_records(path)
    tokens, tags = [], []
    for n, row in enumerate(rows, 1):
        words, t = row.get("tokens"), row.get("tags", row.get("ner_tags"))
        if not isinstance(words, list) or not words:
            raise InputError(f"{path} record {n} has no 'tokens' list", "add the words")
        if not isinstance(t, list):
            raise InputError(f"{path} record {n} has no 'tags' list", "add one tag per word")
        if len(t) != len(words):
            raise InputError(f"{path} record {n} has {len(words)} tokens but {len(t)} tags",
                             "give one tag per token")
        tokens.append([str(w) for w in words])
        tags.append([str(x) for x in t])
    return TokenData(tokens, tags)


def token_features(data: TokenData, tok, T: int, label2id: dict) -> dict:
    """Features plus `word_index` (B, T): the word a piece starts, -1 elsewhere (for eval)."""
    ids, types, labels, words = [], [], [], []
    for sent, tags in zip(data.tokens, data.tags):
        seq, lab, widx = [tok.cls_token_id], [IGNORE], [-1]
        for w, (word, tag) in enumerate(zip(sent, tags)):
            pieces = tok.backend.encode(word, add_special_tokens=False).ids or [tok.unk_token_id]
            if len(seq) + len(pieces) > T - 1:
                break  # words past the window are predicted "O" at eval
            seq += pieces
            lab += [label2id[tag]] + [IGNORE] * (len(pieces) - 1)
            widx += [w] + [-1] * (len(pieces) - 1)
        seq.append(tok.sep_token_id)
        lab.append(IGNORE)
        widx.append(-1)
        ids.append(seq)
        labels.append(lab)
        words.append(widx)
        types.append([0] * len(seq))
    return {**_inputs(pad_batch(ids, tok.pad_token_id, types, width=T)),
            "labels": _pad(labels, IGNORE, T), "word_index": _pad(words, -1, T)}


# -- question answering (SQuAD) -------------------------------------------------------------
@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[dict]          # [{"text", "answer_start"}], empty when unanswerable


def read_squad(path: Path) -> list[SquadExample]:
    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not JSON ({e.msg})", "pass a SQuAD v1.1/v2.0 file") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise InputError(f"{path} has no top-level 'data' list", "pass a SQuAD v1.1/v2.0 file")
    out = []
    for article in doc["data"]:
        for para in article.get("paragraphs", []):
            context = para.get("context")
            if not isinstance(context, str):
                raise InputError(f"{path}: a paragraph has no context", "fix the file")
            for qa in para.get("qas", []):
                qid = str(qa.get("id"))
                answers = [] if qa.get("is_impossible") else list(qa.get("answers", []))
                for a in answers:
                    s, t = a.get("answer_start"), a.get("text")
                    if not isinstance(s, int) or not isinstance(t, str) or \
                            context[s:s + len(t)] != t:
                        raise InputError(
                            f"{path}: answer {t!r} of question {qid} does not occur at "
                            f"answer_start {s}", "fix answer_start (character offset in context)")
                if not qa.get("question", "").strip():
                    raise InputError(f"{path}: question {qid} is empty", "fix the file")
                out.append(SquadExample(qid, qa["question"], context, answers))
    if not out:
        raise InputError(f"{path} holds no questions", "add data")
    return out


@dataclass
class SquadFeatures:
    tensors: dict
    example: list[int] = field(default_factory=list)             # feature -> example index
    offsets: list[list[tuple[int, int] | None]] = field(default_factory=list)  # context chars


def squad_features(examples: list[SquadExample], tok, T: int, stride: int,
                   max_query: int) -> SquadFeatures:
    ids, types, starts, ends = [], [], [], []
    feats = SquadFeatures({})
    for ei, ex in enumerate(examples):
        q = tok.backend.encode(ex.question, add_special_tokens=False).ids[:max_query]
        c = tok.backend.encode(ex.context, add_special_tokens=False)
        room = T - len(q) - 3
        if room < 8:
            raise InputError(f"--max-seq-len {T} leaves no room for the context",
                             "raise --max-seq-len or lower --max-query-len")
        step = max(1, room - min(stride, room - 1))
        n = len(c.ids)
        a = ex.answers[0] if ex.answers else None
        a_start = a["answer_start"] if a else None
        a_end = a_start + len(a["text"]) if a else None
        w = 0
        while True:
            span = range(w, min(n, w + room))
            seq = [tok.cls_token_id, *q, tok.sep_token_id, *(c.ids[i] for i in span),
                   tok.sep_token_id]
            base = len(q) + 2
            s_pos = e_pos = 0
            if a is not None and span and c.offsets[span[0]][0] <= a_start and \
                    c.offsets[span[-1]][1] >= a_end:
                s_pos = base + next(i for i in span if c.offsets[i][1] > a_start) - w
                e_pos = base + max(i for i in span if c.offsets[i][0] < a_end) - w
            ids.append(seq)
            types.append([0] * base + [1] * (len(span) + 1))
            starts.append(s_pos)
            ends.append(e_pos)
            feats.example.append(ei)
            feats.offsets.append([None] * base + [c.offsets[i] for i in span] + [None])
            if w + room >= n:
                break
            w += step
    feats.tensors = {**_inputs(pad_batch(ids, tok.pad_token_id, types, width=T)),
                     "start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}
    return feats
