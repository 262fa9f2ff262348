"""One row of a bulk job's input: its id and the task's input read by the pipeline's own rules,
or what is wrong with it.

A reader (bulk/readers.py) gives raw rows: a mapping (a JSONL object, a CSV row, a Parquet row),
a bare value (a text line, a JSON string or list), a `ReadError` (a line that is not JSON or
not UTF-8), or `BLANK` (a blank line: skipped, as the task commands' `--input` skips it, and
counted; it keeps its number, so chunks and ids stay those of the file's lines). `RowReader`
reads them with the task pipeline's rules, never its own:

    mapping -> the id field, then Pipeline.input_of_row (the task's fields: text, text_pair,
               question/context) -> Pipeline.read_inputs
    value   -> Pipeline.is_json_input (the shape of one input) -> Pipeline.read_inputs

so an empty text, a missing field or a wrong type becomes an error `Row` naming the problem
before the model runs, and the valid rows of a chunk still run together.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

from ..core.errors import InputError
from ..core.pipelines.inputs import Inputs

ID = "id"  # the field that names a row; rows without one are numbered from 0


@dataclass(frozen=True)
class ReadError:
    """A raw row the reader could not read (bad JSON, not UTF-8, wrong field count)."""

    message: str


@dataclass(frozen=True)
class Blank:
    """A blank line of a JSONL or text file, an empty line of a CSV: no row, skipped."""


BLANK = Blank()
SKIPPED = "skipped"  # the key of a blank row's output: counted by the sink, never written


@dataclass(frozen=True)
class Row:
    """number: the row's 0-based place in the input; id: its id field, or `number`; read: its
    one input read by the task's rules (None when `error` says why it cannot run, or it is
    `blank`: skipped)."""

    number: int
    id: object
    read: Inputs | None = None
    error: str | None = None
    blank: bool = False


def _id_problem(value) -> str | None:
    # JSON-scalar ids only: a float or an object would not survive every output format as is
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return f"the id must be a string or an integer, not {json.dumps(value, default=repr)}"
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON "\ud83d"): no file can hold it
            return "the id is not valid Unicode text (a lone surrogate)"
    return None


@dataclass(frozen=True)
class RowReader:
    """Raw rows -> `Row`s with `pipeline`'s rules (a Pipeline class: only its classmethods are
    used, so a reader thread or a Ray task can read rows without a session).

    fields: where a row keeps each field of the task (or the id) when its column is named
    otherwise, e.g. {"text": "review"}.
    """

    pipeline: type
    fields: Mapping[str, str] = field(default_factory=dict)

    def columns(self) -> dict[str, str]:
        """field (id and the task's) -> the column that holds it."""
        return {f: self.fields.get(f, f) for f in (ID, *self.pipeline.row_fields)}

    def rows(self, raws: list, start: int) -> list[Row]:
        """Rows `start`, `start + 1`, ... of the input from their raw forms."""
        return [self.row(raw, start + i) for i, raw in enumerate(raws)]

    def row(self, raw, number: int) -> Row:
        if isinstance(raw, Blank):
            return Row(number, number, blank=True)
        if isinstance(raw, ReadError):
            return Row(number, number, error=raw.message)
        rid = number
        if isinstance(raw, Mapping):
            columns = self.columns()
            given = raw.get(columns[ID])
            if given is not None:
                problem = _id_problem(given)
                if problem:
                    return Row(number, number, error=problem)
                rid = given
            try:
                value = self.pipeline.input_of_row(
                    {f: raw.get(c) for f, c in columns.items() if f != ID})
            except InputError as e:
                return Row(number, rid, error=_where(str(e), self.fields))
        else:
            value = raw
            if not self.pipeline.is_json_input(value, in_list=True):
                kind = "text" if isinstance(value, str) else f"JSON {type(value).__name__}"
                return Row(number, rid, error=f"a {kind} is not an input of "
                                              f"{self.pipeline.task}: give "
                                              f"{self.pipeline.input_hint}")
        try:
            # a list value is one input (a [text, pair]), not a list of inputs
            read = self.pipeline.read_inputs([value] if isinstance(value, list) else value)
        except InputError as e:
            return Row(number, rid, error=str(e))
        return Row(number, rid, read)


def _where(message: str, fields: Mapping[str, str]) -> str:
    """A missing-field message names the column the user mapped the field to."""
    for f, c in fields.items():
        if f != c and f'"{f}"' in message:
            return f'{message} (read from column "{c}")'
    return message
