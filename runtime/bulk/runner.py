"""The per-chunk function of a bulk job: rows in, one output row per input row out, in order.

    runner = ChunkRunner(load(DIR), {"top_k": 3})
    runner(raw_rows, start=0)  # -> [{"id": 0, "result": ...}, {"id": 1, "error": "..."}, ...]

A blank line gives {"id": n, "skipped": "blank"}: the sink counts it and writes nothing.

One pipeline call runs a chunk's valid rows together (the pipeline length-sorts them into
micro-batches); rows the readers or the task's input rules refused are error rows already.
Some problems only the call finds (fill-mask: no mask token; QA: a question longer than
max_question_len): the call then fails with an InputError, and the rows are halved until the
bad ones stand alone — a chunk with one bad row costs about two calls' work, not one per row.

It holds nothing but the pipeline and the parameters, so a job runs it on a local pipeline and
a Ray Data `map_batches` stage can run it with one pipeline per actor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..core.errors import InputError
from ..core.pipelines import Pipeline
from ..core.pipelines.inputs import Inputs
from .rows import SKIPPED, Row, RowReader

ON_ERROR = ("row", "fail")  # an error row in the output, or the job stops at the first one


class RowFailed(InputError):
    """A bad row under `--on-error fail`: the job stops, exit status 1."""

    exit_code = 1


def fail_on_error(numbers, out: list[dict]) -> None:
    """--on-error fail: RowFailed for the first error row among `out` (rows `numbers`)."""
    for number, o in zip(numbers, out):
        if "error" in o:
            raise RowFailed(f"row {number} (id {o['id']!r}): {o['error']}; "
                            "--on-error row writes it as an error row and goes on")


@dataclass
class ChunkRunner:
    pipeline: Pipeline
    params: dict = field(default_factory=dict)  # the pipeline's arguments (top_k, ...)
    fields: Mapping[str, str] = field(default_factory=dict)  # task field -> input column
    on_error: str = "row"

    def __post_init__(self):
        if self.on_error not in ON_ERROR:
            raise InputError(f"unknown on_error {self.on_error!r}", f"use {' or '.join(ON_ERROR)}")
        self.reader = RowReader(type(self.pipeline), self.fields)
        # the parameters, checked once on no rows: a bad one stops the job in one line
        # instead of failing every row
        self.pipeline(Inputs((), single=False), **self.params)

    def __call__(self, raws: list, start: int = 0) -> list[dict]:
        return self.run(self.reader.rows(raws, start))

    def run(self, rows: list[Row]) -> list[dict]:
        out: list[dict | None] = [None] * len(rows)
        good = []
        for i, r in enumerate(rows):
            if r.blank:
                out[i] = {"id": r.id, SKIPPED: "blank"}
            elif r.error is None:
                good.append(i)
            else:
                out[i] = {"id": r.id, "error": r.error}
        self._run([rows[i] for i in good], good, out)
        if self.on_error == "fail":
            fail_on_error([r.number for r in rows], out)
        return out

    def _run(self, rows: list[Row], where: list[int], out: list) -> None:
        if not rows:
            return
        if len(rows) == 1:
            self._one(rows[0], where[0], out)
            return
        try:
            results = self.pipeline(Inputs.concat([r.read for r in rows]), **self.params)
        except InputError:
            half = len(rows) // 2
            self._run(rows[:half], where[:half], out)
            self._run(rows[half:], where[half:], out)
            return
        for i, r, res in zip(where, rows, results):
            out[i] = {"id": r.id, "result": res}

    def _one(self, row: Row, i: int, out: list) -> None:
        """A row alone, in its own (single-input) form, so an error names "the text", not
        "text #0"; its result is the list element the call would give (`per_input`)."""
        try:
            answer = self.pipeline(row.read, **self.params)
        except InputError as e:
            out[i] = {"id": row.id, "error": str(e)}
            return
        out[i] = {"id": row.id,
                  "result": self.pipeline.per_input(answer, row.read, **self.params)[0]}
