"""What every pipeline shares: the task's input rules, and the loop.

A pipeline is built from an `ExportFolder` (folder.py: manifest verified, config.json,
tokenizer) and a `Session` (runtime/core/session.py). The base owns the loop every task runs:

    read_inputs -> records -> encode (long inputs: windows, each with its owner) ->
    length-sorted micro-batches padded on the RIGHT (onnxruntime's fused Attention assumes
    right padding) to the engine's width for the longest member (`batches`) -> session ->
    each row written back to its encoding's position -> per-input post-processing -> unwrap

The call's keyword arguments are the task record's (tasks.py): `__call__` checks them by their
rules, fills in their defaults and hands the read inputs to the subclass's `predict`. Subclasses
declare their input rules (`read_inputs`, `unwrap`, `input_hint`), what a call costs
(`estimate`, which the server checks against its limits before queueing a request) and
post-process; they never index batches back into inputs themselves. Reference: fastembed's
`OnnxTextModel` (the base owns the batch loop).
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, ClassVar, Iterator, Mapping, Sequence

import numpy as np
from tokenizers import Tokenizer

from ..batches import MIN_BATCH_ROWS, Batch, micro_batches
from ..bounds import check_batch_size
from ..errors import ArtifactError, InputError
from ..parameters import check
from ..postprocess import clean_up_tokenization
from ..session import Session
from ..tasks import TASKS, Task
from ..tensors import TaskTensors
from .folder import ExportFolder
from .inputs import Inputs, read_texts, row_field
from .priced import PricedEncodings
from .windows import Windows

log = logging.getLogger("bertonnx")

DEFAULT_BATCH_SIZE = 32
# Tokenizer copies with per-call truncation settings (`Pipeline.backend`) kept at once, least
# recently used dropped first. Each costs about the tokenizer's size (all-MiniLM-L6-v2's
# 30,522-token WordPiece: ~1.3 MB, measured in tests/reliability/test_server_limits.py); a
# server sees one per distinct QA (max_seq_len, doc_stride) or token-classification stride,
# and every one of them was kept forever (688 QA variants: 207 MB -> 4.3 GB).
BACKEND_CACHE = 8


@dataclass(frozen=True)
class Work:
    """What a call would cost, known before the model runs: the tokens it feeds the model
    (every window of a long input counted) and the answers it returns (fill-mask proposals,
    QA spans; 0 where the inputs alone bound them)."""

    tokens: int
    answers: int = 0
    # windows per input, where long inputs are windowed into one answer (chunks.py); () else
    windows: tuple[int, ...] = ()


class Pipeline:
    """Base: holds the session and tokenizer, reads inputs, runs the loop; subclasses
    implement `__call__` (read, run, post-process, unwrap)."""

    task: ClassVar[str]
    spec: ClassVar[Task]         # the task's record, from `task`
    # What the task accepts, for error messages and protocol hints ("send " + input_hint).
    input_hint: ClassVar[str] = "a text or a list of texts"
    # keyword arguments of the call that are inputs, not parameters (QA's question=, context=)
    input_keywords: ClassVar[tuple[str, ...]] = ()
    # the task on the Open Inference Protocol (/v2): its tensors and their conversions
    tensors: ClassVar[TaskTensors]
    # padded tokens per session call: a task's own hard cap (memory: sparse-embedding's MLM
    # logits, tokens x vocabulary floats), or None for the engine's (SessionConfig.batch_tokens,
    # runtime/core/engines.py); and the rows a call keeps past it (batches.py says why)
    batch_tokens: ClassVar[int | None] = None
    batch_rows: ClassVar[int] = MIN_BATCH_ROWS

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "task" in cls.__dict__:
            cls.spec = TASKS[cls.task]

    def __init__(self, folder: ExportFolder, session: Session,
                 batch_size: int = DEFAULT_BATCH_SIZE):
        self.folder = folder
        self.session = session
        self.tokenizer = folder.tokenizer
        check_batch_size(batch_size, "batch_size=32")
        self.batch_size = batch_size
        self.outputs = self.spec.output_names
        problems = self.spec.output_problems(session.output_shapes, folder.config)
        if problems:
            raise ArtifactError(f"{folder.model_path} does not fit {self.task}: "
                                f"{'; '.join(problems)}", "export the model again for this task")
        self.check_model(folder.config, str(folder.path))
        self._backends: OrderedDict[tuple, Tokenizer] = OrderedDict()  # LRU, BACKEND_CACHE
        self._backend_json: str | None = None   # the tokenizer serialized once, for copies
        self._lock = threading.Lock()
        self._priced = PricedEncodings()   # what `work` tokenized, for the call that runs it
        self._cleanup = folder.tokenizer.clean_up_tokenization_spaces  # as transformers decodes
        self._token_types = "token_type_ids" in folder.tokenizer.model_input_names
        # what a call leaves out: the record's defaults, over them the export's own (recorded
        # in its manifest; a folder made elsewhere is read as export reads a model folder)
        own = (folder.manifest.defaults if folder.foreign is None
               else self.folder_defaults(folder.path))
        try:
            check(self.spec.rules, own, self)
        except InputError as e:
            raise ArtifactError(f"{folder.path} sets its own default badly: {e.problem}",
                                "export the model again") from None
        self.defaults: Mapping = MappingProxyType({**self.spec.complete({}), **own})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.folder.path)!r}, providers={self.session.providers})"

    @property
    def max_length(self) -> int:
        return self.folder.max_length

    @property
    def kept_tokens(self) -> int:
        """The tokens of a text a call keeps by default (TEI's max_input_length): the model's
        length here; a task that cuts shorter says so (BGE-M3: FlagEmbedding's 512)."""
        return self.max_length

    # -- the task's input rules ----------------------------------------------------------

    @classmethod
    def read_inputs(cls, inputs) -> Inputs:
        """Every form the task's pipeline accepts, read into one record per input (InputError
        names what is wrong). Read inputs pass through, so a pipeline takes them as well."""
        return read_texts(inputs)

    @classmethod
    def is_json_input(cls, x, in_list: bool = False) -> bool:
        """Whether JSON `x` (a request's "inputs", or with in_list one item of its list) has
        the shape of one input: the server refuses other shapes with `input_hint`, before
        the model runs; `read_inputs` then judges the texts themselves."""
        return isinstance(x, str)

    # The fields of a table row (a JSONL object, a CSV header, Parquet columns) that make one
    # input: bulk jobs (runtime/bulk) read rows by them; other fields of a row are not the task's.
    row_fields: ClassVar[tuple[str, ...]] = ("text",)

    @classmethod
    def input_of_row(cls, row: Mapping):
        """One table row's input, in the shape `is_json_input` takes (here the text itself);
        InputError names a missing field. A null (None) field counts as missing: a CSV or
        Parquet column cannot leave it out."""
        return row_field(row, "text")

    @classmethod
    def unwrap(cls, results: Sequence, inputs: Inputs, **params):
        """The call's answer from one result per record: one input gives its result, a list
        gives the list (even of one). `params` are the call's arguments (some tasks' result
        shape depends on them)."""
        return results[0] if inputs.single else results

    @classmethod
    def per_input(cls, answer, inputs: Inputs, **params) -> list:
        """`unwrap` undone: one result per input from the call's answer (the CLI's tables)."""
        return [answer] if inputs.single else answer

    def check_parameters(self, **params) -> None:
        """Each keyword argument given, checked by type and range (InputError naming it)."""
        check(self.spec.rules, params, self)

    def __call__(self, *args, **kwargs):
        """The task's answer for the inputs (`args`, and `input_keywords`) with the record's
        parameters: each checked by its rule, the others at their defaults."""
        params = {k: kwargs.pop(k) for k in list(kwargs) if k in self.spec.parameters}
        stray = [k for k in kwargs if k not in self.input_keywords]
        if stray:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                            f"{stray[0]!r} (its parameters: {', '.join(self.spec.parameters)})")
        self.check_parameters(**params)
        return self.predict(self.read_inputs(*args, **kwargs), **self.complete(params))

    def complete(self, params: Mapping) -> dict:
        """`params` with every parameter left out at this export's default (`defaults`): the
        one place a left-out parameter gets its value, whichever entry point called."""
        return {**self.defaults, **params}

    @classmethod
    def check_model(cls, config: Mapping, where: str) -> None:
        """ConfigError when a model (`config`: its config.json, or export's summary of it with
        id2label and num_labels) cannot serve the task, e.g. reranking with several labels:
        export refuses it before converting, load before serving. Nothing here."""

    @classmethod
    def folder_defaults(cls, path: Path) -> dict:
        """A model folder's own defaults for the task's parameters (Manifest.defaults): none."""
        return {}

    def predict(self, read: Inputs, **params):
        """The answer for read inputs, every parameter given (checked, defaults filled)."""
        raise NotImplementedError

    @classmethod
    def windowed_chars(cls, inputs: Inputs) -> int:
        """Characters of the texts the task tokenizes whole (windowed, not truncated): those
        cost memory by their length, so the server caps them before tokenizing. 0 here."""
        return 0

    # what `count` counts, in the server's refusal past --max-inputs
    counted: ClassVar[str] = "inputs"

    @classmethod
    def count(cls, inputs: Inputs) -> int:
        """The inputs of a call as the server's --max-inputs counts them, before tokenizing:
        one per record here (a reranker counts its documents)."""
        return len(inputs)

    def work(self, inputs: Inputs, **params) -> Work:
        """What `self(inputs, **params)` would cost (see `Work`), without running the model;
        raises the InputError that call would raise for a bad input. Its encodings are kept
        for that call (priced.py)."""
        with self._priced.pricing():
            return self.estimate(inputs, **self.complete(params))

    def estimate(self, inputs: Inputs, **params) -> Work:
        """`work` with every parameter given. Here: each text's tokens, truncated to the
        model's length."""
        texts = [r if isinstance(r, str) else r.text for r in inputs.records]
        pairs = [getattr(r, "text_pair", None) for r in inputs.records]
        return Work(sum(len(e.ids) for e in self.encode(texts, pairs, warn=False)))

    # -- tokenization ------------------------------------------------------------------

    def backend(self, max_length: int, stride: int = 0, strategy: str = "longest_first",
                direction: str = "right") -> Tokenizer:
        """A copy of the tokenizer with truncation set, shared by calls with that setting
        (`direction` "left" cuts a long text's start: TEI's truncation_direction).

        The shared tokenizer is never mutated (the server calls pipelines from threads). The
        copies live in a least-recently-used cache of BACKEND_CACHE: any sequence of settings
        holds at most that many (a call keeps its own copy alive while it runs, evicted or not).
        """
        key = (max_length, stride, strategy, direction)
        with self._lock:
            tok = self._backends.get(key)
            if tok is not None:
                self._backends.move_to_end(key)
                return tok
            if self._backend_json is None:
                self._backend_json = self.tokenizer.backend.to_str()
            tok = Tokenizer.from_str(self._backend_json)
            tok.no_padding()
            tok.enable_truncation(max_length, stride=stride, strategy=strategy,
                                  direction=direction)
            self._backends[key] = tok
            while len(self._backends) > BACKEND_CACHE:
                self._backends.popitem(last=False)
        return tok

    def encode(self, texts: list[str], pairs: list | None = None, warn: bool = True,
               direction: str = "right", max_length: int | None = None) -> list:
        """Encode with truncation to the model's length (or `max_length` tokens, where a task
        cuts shorter: BGE-M3's, a ColBERT's query and document lengths), warning once when
        anything was cut (`direction` "left": from the start).

        `pairs` holds each text's pair or None (a mixed list costs two tokenizer calls: one
        takes all singles or all pairs). warn=False leaves the warning to the caller
        (`warn_truncated`), e.g. until the inputs are known to be valid, so an error is not
        preceded by a warning about the same text.
        """
        if pairs is not None and all(p is None for p in pairs):
            pairs = None
        if pairs is None or all(p is not None for p in pairs):
            cut = self.max_length if max_length is None else max_length
            backend = self.backend(cut, direction=direction)
            encs = self._priced.through(
                [(cut, direction, t, None if pairs is None else pairs[i])
                 for i, t in enumerate(texts)],
                lambda at: backend.encode_batch([self._part(texts[i], direction, cut)
                                                 for i in at]
                                                if pairs is None else
                                                [(texts[i], pairs[i]) for i in at]))
        else:
            encs = [None] * len(texts)
            single = [i for i, p in enumerate(pairs) if p is None]
            double = [i for i, p in enumerate(pairs) if p is not None]
            kw = {"warn": False, "direction": direction, "max_length": max_length}
            for idx, got in ((single, self.encode([texts[i] for i in single], **kw)),
                             (double, self.encode([texts[i] for i in double],
                                                  [pairs[i] for i in double], **kw))):
                for i, e in zip(idx, got):
                    encs[i] = e
        if warn:
            self.warn_truncated(encs)
        return encs

    def encode_windows(self, inputs: list, max_length: int, stride: int,
                       strategy: str = "longest_first") -> Windows:
        """Encode into windows of max_length tokens overlapping by `stride`: a long input is
        windowed, not truncated (QA's contexts, token classification's texts, long inputs
        chunked). Windows priced by `work` are taken, not made again (priced.py)."""
        backend = self.backend(max_length, stride, strategy)
        encs = self._priced.through([("windows", max_length, stride, strategy, x) for x in inputs],
                                    lambda at: backend.encode_batch([inputs[i] for i in at]))
        return Windows.of(encs)

    def overflowing(self, texts: list[str], pairs: list | None = None,
                    max_length: int | None = None) -> list[int]:
        """The indices of the texts (with `pairs`) cut at the model's length (or `max_length`
        tokens), read from what `work` priced without taking it from the call to come."""
        with self._priced.reading():
            encs = self.encode(list(texts), pairs, warn=False, max_length=max_length)
        return [i for i, e in enumerate(encs) if e.overflowing]

    def warn_truncated(self, encs: list) -> None:
        cut = sum(1 for e in encs if e.overflowing)
        if cut:
            log.warning("%d of %d input(s) were longer than the model's %d tokens and were "
                        "truncated", cut, len(encs), self.max_length)

    def _part(self, text: str, direction: str = "right", cut: int | None = None) -> str:
        """A prefix of `text` (a suffix when truncating on the left) whose encoding truncated
        to `cut` tokens (the model's length) is the whole text's.

        The tokenizers library spends ~700 bytes per token on a full encoding (1 MB of text:
        ~200 MB) though truncation keeps max_length tokens. Pre-tokenization is local, so the
        words wholly inside a prefix tokenize as in the whole text: once they give more than
        max_length tokens, the prefix truncates the same. The prefix doubles until then (a text
        of characters the tokenizer drops ends up whole)."""
        cut = self.max_length if cut is None else cut
        n = 16 * cut
        left = direction == "left"
        while n < len(text):
            part = text[-n:] if left else text[:n]
            words = self.tokenizer.backend.encode(part, add_special_tokens=False).word_ids
            # the word at the cut may be partial: whole words only
            if words and sum(w != words[0 if left else -1] for w in words) > cut:
                return part
            n *= 2
        return text

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        text = self.tokenizer.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self._cleanup else text

    def decode_batch(self, seqs: list, skip_special_tokens: bool = True) -> list[str]:
        out = self.tokenizer.backend.decode_batch([list(map(int, s)) for s in seqs],
                                                  skip_special_tokens=skip_special_tokens)
        return [clean_up_tokenization(t) for t in out] if self._cleanup else out

    def tokens_to_string(self, tokens: list[str]) -> str:
        """transformers' convert_tokens_to_string for a fast BERT tokenizer: the decoder."""
        return self.tokenizer.backend.decoder.decode(tokens)

    # -- running -----------------------------------------------------------------------

    def batches(self, encodings: list, batch_size: int | None = None,
                longest: int | None = None) -> Iterator[Batch]:
        """`encodings` as length-sorted micro-batches sized and padded for this engine, never
        wider than `longest` (the longest row the caller can make; None: the model's)."""
        size = self.batch_size if batch_size is None else batch_size  # 0 is an error, not "default"
        check_batch_size(size, "batch_size=32")
        cfg = self.session.config   # the engine's tokens per call and width multiple
        limit = self.max_length if longest is None else min(longest, self.max_length)
        return micro_batches(encodings, size, self.tokenizer.pad_token_id, self.batch_tokens
                             or cfg.batch_tokens, self.batch_rows, cfg.pad_multiple, limit)

    def run(self, encodings: list, batch_size: int | None = None
            ) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
        for batch, out in self.session.run_each(self.batches(encodings, batch_size),
                                                lambda b: b.feeds(self._token_types), self.outputs):
            # a graph whose output axes are symbolic escaped the check at load: check the
            # arrays (labels read past config.json's id2label would flip or shift the answer)
            problems = self.spec.output_problems(
                {k: list(v.shape) for k, v in out.items()}, self.folder.config)
            if problems:
                raise ArtifactError(f"{self.folder.model_path} answered outputs that do not fit "
                                    f"{self.task}: {'; '.join(problems)}",
                                    "export the model again for this task")
            yield batch, out

    def infer(self, encodings: list, per_batch: Callable[[Batch, dict], Sequence],
              batch_size: int | None = None) -> list:
        """Run `encodings` in length-sorted micro-batches; `per_batch(batch, outputs)` gives
        one result per row, and each is written back to its encoding's position."""
        results: list = [None] * len(encodings)
        for batch, out in self.run(encodings, batch_size):
            for i, r in zip(batch.index, per_batch(batch, out)):
                results[i] = r
        return results


def unpadded(batch: Batch, array: np.ndarray) -> list[np.ndarray]:
    """Each row of a (B, T, ...) output cut to its row's own tokens."""
    return [array[row, :n] for row, n in enumerate(batch.lengths)]
