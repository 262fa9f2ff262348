"""A task's tensors on the Open Inference Protocol (KServe v2 / Triton HTTP): the declaration
each pipeline class makes of its own (`Pipeline.tensors`), read by runtime/server/v2.py.

Raw text in, as BYTES tensors named after the task's input fields; the pipeline's answers out,
as tensors; the parameters a request may set are the task record's (`Param.v2`). Each answer is
the library's own for the same inputs and parameters (one best label; the best span; the top_k
proposals of the one mask), so the tensors are a new layout of the same numbers:

    task                  inputs (BYTES [N])          outputs
    fill-mask             text (one mask each)        token_str BYTES, score FP32, token INT64,
                                                      sequence BYTES — all [N, top_k]
    text-classification   text, text_pair (optional)  label BYTES [N], score FP32 [N]
    question-answering    question, context           answer BYTES, score FP32, start INT64,
                                                      end INT64 — all [N]
    token-classification  text                        entities BYTES [N]: each the pipeline's
                                                      list of entities as JSON
    feature-extraction    text                        embedding FP32 [N, H]
    text-ranking          query, document (a pair     score FP32 [N], in row order (a ranked
                          a row)                      list per query would be ragged)
    zero-shot-            text                        labels BYTES, scores FP32 — both [N,
    classification                                    labels], each row's sorted
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, is_dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from .families import config_spellings
from .parameters import Rule
from .tasks import TASKS

BYTES, FP32, INT64 = "BYTES", "FP32", "INT64"
NUMPY = MappingProxyType({BYTES: np.object_, FP32: np.float32, INT64: np.int64})
HIDDEN = "hidden"   # an axis the model's vector width sizes (metadata reads it off the model)
N, NK = (-1,), (-1, -1)  # [N] and [N, k] of any size


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
    # input tensors (name -> texts, all of one length) -> the pipeline's inputs, one per row
    read: Callable[[dict[str, list[str]], Any], list]
    # the pipeline's results (one per row) -> output tensors by name
    write: Callable[[list], dict[str, np.ndarray]]

    @property
    def parameters(self) -> Mapping[str, Rule | None]:
        """The pipeline's keyword arguments a request may set (the task record's `v2`): a Rule
        narrows the pipeline's own (which still applies), None keeps it as it is."""
        return TASKS[self.task].v2_parameters

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)


def hidden_size(pipe) -> int:
    """The width of the vectors the pipeline answers: its own `dimension` where it has one (a
    sentence-transformers export's Dense modules or concatenated poolings change it), else the
    model's token vectors' (`token_width`)."""
    own = getattr(pipe, "dimension", None)
    return own if isinstance(own, int) else token_width(pipe)


def token_width(pipe) -> int:
    """The width of the model's token vectors: the graph's output axis where it is a number,
    else config.json's, however the family spells it (families.py `config_spellings`)."""
    width = pipe.session.output_shapes.get("last_hidden_state", [None] * 3)[-1]
    if isinstance(width, int):
        return width
    config = pipe.folder.config
    return int(next(config[k] for k in config_spellings("hidden_size") if config.get(k)))


def texts(tensors: dict, pipe) -> list[str]:
    """The plain-text tasks' reader: the "text" tensor's elements are the inputs."""
    return tensors["text"]


def column(results: list, key: str, dtype) -> np.ndarray:
    """One field of every result, as an output tensor."""
    return np.array([r[key] for r in results], dtype=dtype)


def jsonable(o):
    """json.dumps' `default` for numpy values and dataclasses in results."""
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if is_dataclass(o) and not isinstance(o, type):
        return asdict(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
