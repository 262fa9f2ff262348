"""How a call's inputs are read, once: `Inputs` (one record per input, and whether one input
was given) and the records the tasks read them into.

Every pipeline class declares its rules as `read_inputs(inputs) -> Inputs` and
`unwrap(results, inputs, **params)`; the server, the CLI and the benchmark call those instead
of re-encoding the task's shapes. The rule for results is transformers': one input gives one
result, a list gives a list (even of one), in input order.

    read = TextClassificationPipeline.read_inputs([{"text": "a", "text_pair": "b"}, "c"])
    read.records   # (TextPair(text='a', text_pair='b'), TextPair(text='c', text_pair=None))
    out = pipe(read)                       # a pipeline takes read inputs as they are
    merged = Inputs.concat([read_a, read_b])   # several requests, one pipeline call
    parts = Inputs.split(pipe(merged), [read_a, read_b])
    answers = [pipe.unwrap(p, r) for p, r in zip(parts, [read_a, read_b])]
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, NamedTuple

from ..errors import InputError


class TextPair(NamedTuple):
    """A text-classification input: a text, or a text with its pair."""

    text: str
    text_pair: str | None = None


class QAInput(NamedTuple):
    """A question-answering input (a tuple, so the tokenizer takes it as a pair)."""

    question: str
    context: str


class RankInput(NamedTuple):
    """A text-ranking input: a query and the documents to rank for it."""

    query: str
    documents: tuple[str, ...]


@dataclass(frozen=True)
class Inputs:
    """A call's inputs read by its task's rules.

    records: one per input, in order (a str, a TextPair, a QAInput or a RankInput, by task).
    single: one input was given, not a list: its result comes back on its own.
    form: "str", "dict" or "list" — how they were given (text-classification's legacy
    result shape differs between a lone str and a lone dict).
    """

    records: tuple
    single: bool
    form: str = "list"

    def __len__(self) -> int:
        return len(self.records)

    def listed(self) -> "Inputs":
        """The same records as a list input: the call returns one result per record."""
        return replace(self, single=False, form="list")

    @staticmethod
    def concat(parts: "list[Inputs]") -> "Inputs":
        """Several calls' inputs as one list input (the server merges requests this way)."""
        return Inputs(tuple(r for p in parts for r in p.records), single=False)

    @staticmethod
    def split(results: list, parts: "list[Inputs]") -> list:
        """The merged call's results cut back into each part's slice (still to unwrap)."""
        out, start = [], 0
        for p in parts:
            out.append(results[start:start + len(p)])
            start += len(p)
        if start != len(results):
            raise RuntimeError(f"{len(results)} results for {start} inputs")
        return out


def read_texts(inputs, what: str = "text") -> Inputs:
    """A str or a list of str, every text non-empty: the plain-text tasks' rule."""
    if isinstance(inputs, Inputs):
        return inputs
    single = isinstance(inputs, str)
    texts = [inputs] if single else inputs
    if not isinstance(texts, (list, tuple)):
        raise InputError(f"expected a string or a list of strings, got {type(inputs).__name__}",
                         f"pass the {what} as a str or list[str]")
    for i, t in enumerate(texts):
        check_text(t, what if single else f"{what} #{i}", index=i)
    return Inputs(tuple(texts), single, "str" if single else "list")


def check_text(text, what: str = "text", index: int | None = None) -> None:
    """`index`: the input's place in the call, carried by the error (InputError.index)."""
    if not isinstance(text, str):
        raise InputError(f"{what} is a {type(text).__name__}, not a string", "pass text",
                         index=index)
    if not text.strip():
        raise InputError(f"{what} is empty", "pass some text", index=index)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # a lone surrogate (e.g. "\ud83d" from a JSON file cut mid-emoji) is not Unicode text;
        # the tokenizer would fail with an opaque TypeError
        raise InputError(f"{what} holds a lone surrogate U+{ord(text[e.start]):04X} at "
                         f"character {e.start}", "fix the text's encoding", index=index) from e


def row_field(row: Mapping, name: str):
    """A required field of a table row."""
    value = row.get(name)
    if value is None:
        raise InputError(f'no "{name}" field', f'give every row a "{name}"')
    return value
