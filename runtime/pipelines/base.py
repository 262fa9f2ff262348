"""What every pipeline shares: the export folder, tokenization limits, length-sorted batching.

A pipeline is built from an `ExportFolder` (manifest verified, config.json, tokenizer) and a
`Session` (runtime/session.py). Lists run through length-sorted micro-batches padded on the
RIGHT only to the longest member — onnxruntime's fused Attention assumes right padding — and
results are written back in input order.
"""
from __future__ import annotations


import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

import numpy as np
from tokenizers import Tokenizer

from ..contract import MODEL_NAME, output_names
from ..errors import ArtifactError, InputError
from ..files import read_json_object
from ..manifest import Manifest
from ..postprocess import clean_up_tokenization
from ..session import Session
from ..tokenizer import WordPieceTokenizer, load_tokenizer

log = logging.getLogger("bertonnx")

DEFAULT_BATCH_SIZE = 32
# Padded tokens per session call. Past a few thousand, attention's (B, nh, T, T) scores leave
# the cache and a batch costs more per text than smaller ones (measured: MiniLM, 192 mixed
# tweets/passages: unbounded 8.2-8.5 s, 8192 8.0-8.1, 4096 6.3, 2048 5.7-6.2, 1024 6.1 s);
# short texts still go 32 wide.
MAX_BATCH_TOKENS = 2048


@dataclass
class ExportFolder:
    """An export folder read and checked: manifest (sha256 verified), config.json, tokenizer."""

    path: Path
    manifest: Manifest
    config: dict
    tokenizer: WordPieceTokenizer
    tokenizer_config: dict

    @classmethod
    def read(cls, path: str | Path, manifest: Manifest | None = None) -> "ExportFolder":
        path = Path(path)
        manifest = manifest or Manifest.read(path)
        tokenizer = load_tokenizer(path)  # reads tokenizer_config.json once, for both
        return cls(path, manifest, _read_json(path / "config.json"), tokenizer, tokenizer.config)

    @property
    def model_path(self) -> Path:
        return self.path / MODEL_NAME

    @property
    def max_length(self) -> int:
        """Longest sequence the model takes: position table size, capped by the tokenizer's."""
        limits = [self.config.get("max_position_embeddings"), self.tokenizer.model_max_length]
        limits = [n for n in limits if isinstance(n, int) and n > 0]
        return min(limits) if limits else 512

    @property
    def id2label(self) -> dict[int, str]:
        raw = self.config.get("id2label") or self.manifest.config.get("id2label") or {}
        return {int(k): str(v) for k, v in raw.items()}


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise ArtifactError(f"{path} is missing from the export", "export the model again")
    return read_json_object(path, "export the model again")


@dataclass
class Batch:
    """One right-padded micro-batch: rows are `index` into the caller's list."""

    index: np.ndarray            # (B,) positions in the input list
    input_ids: np.ndarray        # (B, T) int64
    attention_mask: np.ndarray   # (B, T) int64
    token_type_ids: np.ndarray   # (B, T) int64
    lengths: np.ndarray          # (B,)

    def feeds(self) -> dict[str, np.ndarray]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": self.token_type_ids}


def _spans(sorted_lengths: np.ndarray, batch_size: int, max_tokens: int) -> Iterator[tuple]:
    """[lo, hi) runs of ascending lengths: ≤ batch_size rows and ≤ max_tokens padded tokens
    (always at least one row), so long texts go in small batches and short ones in full ones."""
    lo, n = 0, len(sorted_lengths)
    while lo < n:
        hi = lo + 1
        while (hi < n and hi - lo < batch_size
               and (hi - lo + 1) * int(sorted_lengths[hi]) <= max_tokens):
            hi += 1
        yield lo, hi
        lo = hi


def micro_batches(encodings: list, batch_size: int, pad_id: int,
                  max_tokens: int = MAX_BATCH_TOKENS) -> Iterator[Batch]:
    """Length-sorted micro-batches of `encodings` (anything with .ids and .type_ids)."""
    if batch_size < 1:
        raise InputError(f"batch_size must be ≥ 1, got {batch_size}", "pass a positive batch size")
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    order = np.argsort(lengths, kind="stable")
    for lo, hi in _spans(lengths[order], batch_size, max_tokens):
        idx = order[lo:hi]
        lens = lengths[idx]
        T = int(lens.max())
        ids = np.full((len(idx), T), pad_id, dtype=np.int64)
        types = np.zeros((len(idx), T), dtype=np.int64)
        for row, i in enumerate(idx):  # one copy per row; the tokens stay in C
            ids[row, :lens[row]] = encodings[i].ids
            types[row, :lens[row]] = encodings[i].type_ids
        mask = (np.arange(T)[None, :] < lens[:, None]).astype(np.int64)
        yield Batch(idx, ids, mask, types, lens)


class Pipeline:
    """Base: holds the session and tokenizer; subclasses implement `__call__`."""

    task: ClassVar[str]

    def __init__(self, folder: ExportFolder, session: Session,
                 batch_size: int = DEFAULT_BATCH_SIZE):
        self.folder = folder
        self.session = session
        self.tokenizer = folder.tokenizer
        self.batch_size = batch_size
        self.outputs = output_names(self.task)
        missing = [n for n in self.outputs if n not in session.output_names]
        if missing:
            raise ArtifactError(f"{folder.model_path} lacks the {self.task} outputs {missing}",
                                "export the model again for this task")
        self._backends: dict[tuple, Tokenizer] = {}
        self._lock = threading.Lock()
        self._cleanup = bool(folder.tokenizer_config.get("clean_up_tokenization_spaces", True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.folder.path)!r}, providers={self.session.providers})"

    @property
    def max_length(self) -> int:
        return self.folder.max_length

    # -- tokenization ------------------------------------------------------------------

    def backend(self, max_length: int, stride: int = 0, strategy: str = "longest_first"
                ) -> Tokenizer:
        """A copy of the tokenizer with truncation set, one per setting, shared by calls.

        The shared tokenizer is never mutated (the server calls pipelines from threads).
        """
        key = (max_length, stride, strategy)
        with self._lock:
            tok = self._backends.get(key)
            if tok is None:
                tok = Tokenizer.from_str(self.tokenizer.backend.to_str())
                tok.no_padding()
                tok.enable_truncation(max_length, stride=stride, strategy=strategy)
                self._backends[key] = tok
        return tok

    def encode(self, texts: list[str], pairs: list[str] | None = None, warn: bool = True) -> list:
        """Encode with truncation to the model's length, warning once when anything was cut.

        warn=False leaves the warning to the caller (`warn_truncated`), e.g. until the inputs
        are known to be valid, so an error is not preceded by a warning about the same text.
        """
        batch = [self._head(t) for t in texts] if pairs is None else list(zip(texts, pairs))
        encs = self.backend(self.max_length).encode_batch(batch)
        if warn:
            self.warn_truncated(encs)
        return encs

    def warn_truncated(self, encs: list) -> None:
        cut = sum(1 for e in encs if e.overflowing)
        if cut:
            log.warning("%d of %d input(s) were longer than the model's %d tokens and were "
                        "truncated", cut, len(encs), self.max_length)

    def _head(self, text: str) -> str:
        """A prefix of `text` whose truncated encoding is the whole text's.

        The tokenizers library spends ~700 bytes per token on a full encoding (1 MB of text:
        ~200 MB) though truncation keeps max_length tokens. Pre-tokenization is local, so the
        words wholly inside a prefix tokenize as in the whole text: once they give more than
        max_length tokens, the prefix truncates the same. The prefix doubles until then (a text
        of characters the tokenizer drops ends up whole).
        """
        n = 16 * self.max_length
        while n < len(text):
            words = self.tokenizer.backend.encode(text[:n], add_special_tokens=False).word_ids
            if words and sum(1 for w in words if w != words[-1]) > self.max_length:
                return text[:n]
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

    def run(self, encodings: list, batch_size: int | None = None
            ) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
        size = self.batch_size if batch_size is None else batch_size  # 0 is an error, not "default"
        for batch in micro_batches(encodings, size,
                                   self.tokenizer.pad_token_id):
            yield batch, self.session.run(batch.feeds(), self.outputs)


def as_text_list(inputs, what: str = "text") -> tuple[list[str], bool]:
    """(texts, was_single); every text a non-empty str."""
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, (list, tuple)):
        raise InputError(f"expected a string or a list of strings, got {type(inputs).__name__}",
                         f"pass the {what} as a str or list[str]")
    for i, t in enumerate(texts):
        check_text(t, what if single else f"{what} #{i}")
    return list(texts), single


def check_text(text, what: str = "text") -> None:
    if not isinstance(text, str):
        raise InputError(f"{what} is a {type(text).__name__}, not a string", "pass text")
    if not text.strip():
        raise InputError(f"{what} is empty", "pass some text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # a lone surrogate (e.g. "\ud83d" from a JSON file cut mid-emoji) is not Unicode text;
        # the tokenizer would fail with an opaque TypeError
        raise InputError(f"{what} holds a lone surrogate U+{ord(text[e.start]):04X} at "
                         f"character {e.start}", "fix the text's encoding") from e
