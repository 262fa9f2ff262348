"""Each task's tensors on the Open Inference Protocol (KServe v2 / Triton HTTP), declared once.

As runtime/contract.py declares what every export's graph takes and gives, `TENSORS` declares
what each task's model takes and gives over /v2: raw text in, as BYTES tensors named after the
task's fields; the pipeline's answers out, as tensors; and which of the pipeline's keyword
arguments a request's `parameters` may set. v2.py reads this table for the model metadata, to
read a request and to write its answer — it holds no task of its own.

    task                  inputs (BYTES [N])          outputs
    fill-mask             text (one mask each)        token_str BYTES, score FP32, token INT64,
                                                      sequence BYTES — all [N, top_k]
    text-classification   text, text_pair (optional)  label BYTES [N], score FP32 [N]
    question-answering    question, context           answer BYTES, score FP32, start INT64,
                                                      end INT64 — all [N]
    token-classification  text                        entities BYTES [N]: each the pipeline's
                                                      list of entities as JSON
    feature-extraction    text                        embedding FP32 [N, H]

Each answer is the library's own for the same inputs and parameters (one best label; the best
span; the top_k proposals of the one mask), so the tensors are a new layout of the same numbers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import InputError
from ..pipelines.parameters import Rule, choice
from .protocol import jsonable

BYTES, FP32, INT64 = "BYTES", "FP32", "INT64"
NUMPY = MappingProxyType({BYTES: np.object_, FP32: np.float32, INT64: np.int64})
HIDDEN = "hidden"   # an axis the model's vector width sizes (metadata reads it off the model)


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str               # BYTES, FP32 or INT64
    shape: tuple                # -1 for any size, HIDDEN for the model's width
    optional: bool = False      # an input a request may leave out


@dataclass(frozen=True)
class TaskTensors:
    """One task on /v2: its tensors, the parameters a request may set, and the two
    conversions between tensors and the pipeline's own inputs and results."""

    task: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    # the pipeline's keyword arguments a request may set; a Rule narrows the pipeline's own
    # (which still applies), None keeps it as it is
    parameters: Mapping[str, Rule | None]
    # input tensors (name -> texts, all of one length) -> the pipeline's inputs, one per row
    read: Callable[[dict[str, list[str]], Any], list]
    # the pipeline's results (one per row) -> output tensors by name
    write: Callable[[list], dict[str, np.ndarray]]

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)


def hidden_size(pipe) -> int:
    """The width of the model's vectors: the graph's output axis where it is a number, else
    config.json's (`dim` in DistilBERT's)."""
    width = pipe.session.output_shapes.get("last_hidden_state", [None] * 3)[-1]
    if isinstance(width, int):
        return width
    config = pipe.folder.config
    return int(config.get("hidden_size") or config.get("dim"))


def _texts(tensors: dict, pipe) -> list[str]:
    return tensors["text"]


def _column(results: list, key: str, dtype) -> np.ndarray:
    return np.array([r[key] for r in results], dtype=dtype)


# -- fill-mask -------------------------------------------------------------------------------


def _one_mask_texts(tensors: dict, pipe) -> list[str]:
    """The texts, each with at most one mask: [N, top_k] holds one mask's proposals per row
    (a text without one is the pipeline's own error)."""
    mask = pipe.tokenizer.mask_token
    for i, text in enumerate(tensors["text"]):
        if text.count(mask) > 1:
            raise InputError(f"text #{i} has {text.count(mask)} {mask} tokens; over /v2 each "
                             "text fills one mask ([N, top_k] outputs)",
                             "send one text per mask, or POST /predict for several", index=i)
    return tensors["text"]


def _fill_mask_out(results: list) -> dict[str, np.ndarray]:
    for i, r in enumerate(results):
        if r and isinstance(r[0], list):
            raise InputError(f"text #{i} holds several mask tokens after tokenization",
                             "send one mask per text", index=i)
    return {"token_str": np.array([[p["token_str"] for p in r] for r in results], np.object_),
            "score": np.array([[p["score"] for p in r] for r in results], np.float32),
            "token": np.array([[p["token"] for p in r] for r in results], np.int64),
            "sequence": np.array([[p["sequence"] for p in r] for r in results], np.object_)}


# -- text-classification ---------------------------------------------------------------------


def _classify_in(tensors: dict, pipe) -> list:
    """A text, or {"text", "text_pair"} where text_pair is given and its element not empty
    (a BYTES tensor holds no nulls: "" marks a row without a pair)."""
    pairs = tensors.get("text_pair") or [""] * len(tensors["text"])
    return [{"text": t, "text_pair": p} if p else t for t, p in zip(tensors["text"], pairs)]


def _classify_out(results: list) -> dict[str, np.ndarray]:
    return {"label": _column(results, "label", np.object_),
            "score": _column(results, "score", np.float32)}


# -- question-answering ----------------------------------------------------------------------


def _qa_in(tensors: dict, pipe) -> list:
    return [{"question": q, "context": c}
            for q, c in zip(tensors["question"], tensors["context"])]


def _qa_out(results: list) -> dict[str, np.ndarray]:
    return {"answer": _column(results, "answer", np.object_),
            "score": _column(results, "score", np.float32),
            "start": _column(results, "start", np.int64),
            "end": _column(results, "end", np.int64)}


# -- token-classification, feature-extraction ------------------------------------------------


def _entities_out(results: list) -> dict[str, np.ndarray]:
    return {"entities": np.array([json.dumps(r, default=jsonable, ensure_ascii=False)
                                  for r in results], np.object_)}


def _embedding_out(results: list) -> dict[str, np.ndarray]:
    return {"embedding": np.asarray(results, dtype=np.float32)}


_N, _NK = (-1,), (-1, -1)
TENSORS: Mapping[str, TaskTensors] = MappingProxyType({t.task: t for t in (
    TaskTensors("fill-mask", (Tensor("text", BYTES, _N),),
                (Tensor("token_str", BYTES, _NK), Tensor("score", FP32, _NK),
                 Tensor("token", INT64, _NK), Tensor("sequence", BYTES, _NK)),
                {"top_k": None, "targets": None}, _one_mask_texts, _fill_mask_out),
    # one best label per text: top_k (several labels, or all) would make the rows ragged
    TaskTensors("text-classification",
                (Tensor("text", BYTES, _N), Tensor("text_pair", BYTES, _N, optional=True)),
                (Tensor("label", BYTES, _N), Tensor("score", FP32, _N)),
                {"function_to_apply": None}, _classify_in, _classify_out),
    # the best span per question (top_k 1): several would make the rows ragged
    TaskTensors("question-answering",
                (Tensor("question", BYTES, _N), Tensor("context", BYTES, _N)),
                (Tensor("answer", BYTES, _N), Tensor("score", FP32, _N),
                 Tensor("start", INT64, _N), Tensor("end", INT64, _N)),
                dict.fromkeys(("doc_stride", "max_answer_len", "max_seq_len", "max_question_len",
                               "handle_impossible_answer", "align_to_words")),
                _qa_in, _qa_out),
    TaskTensors("token-classification", (Tensor("text", BYTES, _N),),
                (Tensor("entities", BYTES, _N),),
                {"aggregation_strategy": None, "ignore_labels": None, "stride": None},
                _texts, _entities_out),
    # pooling "none" (a [T, H] matrix per text) would make the rows ragged
    TaskTensors("feature-extraction", (Tensor("text", BYTES, _N),),
                (Tensor("embedding", FP32, (-1, HIDDEN)),),
                {"pooling": choice(("mean", "cls")), "normalize": None}, _texts, _embedding_out),
)})
