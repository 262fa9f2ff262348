"""Input files of a bulk job, read a row at a time: JSONL, CSV with a header, plain text lines,
Parquet. Memory holds one row (one Parquet record batch), never the file.

Every physical line (JSONL, text) or record (CSV, Parquet) is one row, numbered from 0: an
unreadable one is an error row in its place, never a silent skip; a blank one is `BLANK`, a row
the job skips and counts (as the task commands' `--input` skips it), keeping its number. A CSV
is read strictly: a quote that opens a field and never closes, or closes with more characters
after it, would merge the records after it into one text, so the job stops with one line
naming the file and the line. A format is
named by `--input-format` or the file's extension; any other extension is sniffed as
`runtime/io.py` does (a first line starting with `{` or `"` is JSONL, else text).

`chunk_starts` finds where each chunk begins (a byte offset; Parquet: the row number) in one
pass, so a chunk can be read alone — `rows(first, at)` — as a Ray read task does.
"""
from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path
from typing import Iterator

from ..core.errors import ConfigError, InputError
from .rows import BLANK, ID, ReadError

FORMATS = ("jsonl", "csv", "text", "parquet")
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".txt": "text",
              ".text": "text", ".parquet": "parquet", ".pq": "parquet"}
_BOM = b"\xef\xbb\xbf"


def pyarrow_parquet():
    """pyarrow.parquet, or one line naming the extra that brings it."""
    try:  # lazy: pyarrow is the parquet extra's; JSONL, CSV and text need nothing
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ConfigError("Parquet files need pyarrow, which is not installed",
                          "pip install 'bertonnx[parquet]'") from e
    return pq


def input_format(path: Path, given: str | None = None) -> str:
    if not path.is_file():
        raise InputError(f"input file {path} does not exist" if not path.exists()
                         else f"{path} is not a file", "check the --input path")
    if given is not None:
        return given
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is not None:
        return fmt
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                return "jsonl" if line.lstrip(_BOM + b" \t").startswith((b"{", b'"')) else "text"
    return "text"


def chunks(rows: Iterator, size: int, start: int) -> Iterator[tuple[int, list]]:
    """(number of the first row, raw rows) of exactly `size` rows each (the last may be short):
    fixed boundaries, so a resumed job runs the same chunks as a clean one."""
    while True:
        chunk = list(itertools.islice(rows, size))
        if not chunk:
            return
        yield start, chunk
        start += len(chunk)


def _starts(positions: Iterator[tuple[int, object]], size: int, start: int) -> list:
    """(row, position) of rows start, start + size, ... from every row's (row, position)."""
    return [(n, at) for n, at in positions if n >= start and (n - start) % size == 0]


class LineReader:
    """JSONL (each line a JSON value) or plain text (each line one text)."""

    def __init__(self, path: Path, as_json: bool):
        self.path, self.as_json = path, as_json

    def chunk_starts(self, size: int, start: int = 0) -> list[tuple[int, int]]:
        def positions():
            at = 0
            with open(self.path, "rb") as f:
                for n, line in enumerate(f):
                    yield n, at
                    at += len(line)

        return _starts(positions(), size, start)

    def count(self) -> int:
        """Lines, by counting newlines in 1 MB blocks (about a second per GB)."""
        n, last = 0, b"\n"
        with open(self.path, "rb") as f:
            while block := f.read(1 << 20):
                n += block.count(b"\n")
                last = block[-1:]
        return n + (last != b"\n")

    def rows(self, skip: int = 0, at: int | None = None) -> Iterator:
        """Rows from row `skip` on; `at`: the byte offset where row `skip` begins."""
        with open(self.path, "rb") as f:
            first = 0
            if at is not None:
                f.seek(at)
                first = skip
            for n, line in enumerate(f, first):
                if n < skip:
                    continue
                if n == 0 and line.startswith(_BOM):
                    line = line[3:]
                yield self._raw(line.rstrip(b"\n").rstrip(b"\r"))

    def _raw(self, line: bytes):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return ReadError(f"the line is not UTF-8 (byte 0x{line[e.start]:02x} at byte "
                             f"{e.start + 1})")
        if not text.strip():
            return BLANK
        if not self.as_json:
            return text
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            return ReadError(f"the line is not valid JSON ({e.msg} at column {e.colno})")


def _text_lines(f, at: int, where: list) -> Iterator[str]:
    """The lines of binary file `f` from byte `at`, as text mode with newline="" gives them
    (split at \n, \r\n or a lone \r, ends kept; UTF-8, a leading BOM dropped; a byte that
    is not UTF-8 kept as a surrogate, found later in its row only). where[0]: the byte offset
    after the last line given."""
    f.seek(at)
    where[0], rest = at, b""
    while True:
        block = f.read(1 << 16)
        lines = (rest + block).splitlines(keepends=True)
        # the last line may go on in the next block (a final \r may be half of a \r\n)
        rest = lines.pop() if block and lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            text = line[3:] if where[0] == 0 and line.startswith(_BOM) else line
            where[0] += len(line)
            yield text.decode("utf-8", "surrogateescape")
        if not block:
            return


def _flag_end(lines: Iterator[str], ended: list) -> Iterator[str]:
    """`lines`, then ended[0] = True once the last has been taken and one more asked for."""
    yield from lines
    ended[0] = True


class CsvReader:
    """A header row, then one row per record; an empty cell is a missing value (CSV cannot
    tell them apart)."""

    def __init__(self, path: Path):
        self.path = path
        # a review or an article can be longer than the csv module's 128 KiB field limit; the
        # limit is the process's, raised once, never lowered
        csv.field_size_limit(max(csv.field_size_limit(), 1 << 30))
        self.data_at = 0  # byte offset of the first record after the header
        for record, end in self._records(0):
            self.header = record if isinstance(record, list) else []
            self.data_at = end
            break
        else:
            self.header = []

    def _records(self, at: int) -> Iterator[tuple[list, int]]:
        """(record, byte offset after it) from byte `at` on."""
        where, ended = [at], [False]
        with open(self.path, "rb") as f:
            # csv pulls one line at a time, so `where` is the end of the record it returns;
            # strict: a stray quote is an error, where the default reader merges records
            records = csv.reader(_flag_end(_text_lines(f, at, where), ended), strict=True)
            while True:
                before = records.line_num
                try:
                    record = next(records)
                except StopIteration:
                    return
                except csv.Error as e:
                    self._broken(at, before + 1, records.line_num, e, ended[0])
                yield record, where[0]

    def _broken(self, at: int, first: int, last: int, e: csv.Error, at_end: bool) -> None:
        """One line for a record csv refused: lines `first`..`last` counted from byte `at`.
        Every record after it would be misread, so the job stops, naming where it begins."""
        with open(self.path, "rb") as f:
            where = [0]
            before = sum(1 for _ in itertools.takewhile(
                lambda _: where[0] <= at, _text_lines(f, 0, where))) if at else 0
        line = before + first
        if at_end:  # the file ended inside a quoted field
            raise InputError(f"{self.path} line {line}: a quoted field has no closing quote, "
                             "so the rest of the file would be one text",
                             'close the quote (a quote inside a quoted field is written "")')
        end = f" (on line {before + last})" if last != first else ""
        raise InputError(f"{self.path} line {line}: the record is not valid CSV ({e}{end}); "
                         "read leniently, it would swallow the records after it",
                         "a quoted field's closing quote must be followed by a comma or the "
                         'line\'s end (a quote inside a quoted field is written "")')

    def count(self) -> None:
        return None  # quoted newlines: only a full parse knows the rows

    def chunk_starts(self, size: int, start: int = 0) -> list[tuple[int, int]]:
        def positions():
            at = self.data_at
            for n, (_, end) in enumerate(self._records(self.data_at)):
                yield n, at
                at = end

        return _starts(positions(), size, start)

    def rows(self, skip: int = 0, at: int | None = None) -> Iterator:
        """Rows from row `skip` on; `at`: the byte offset where row `skip` begins."""
        first = 0 if at is None else skip
        for n, (record, _) in enumerate(self._records(self.data_at if at is None else at),
                                        first):
            if n >= skip:
                yield self._raw(record)

    def _raw(self, record: list):
        if not record:
            return BLANK
        if len(record) != len(self.header):
            return ReadError(f"the record has {len(record)} fields, the header "
                             f"{len(self.header)}")
        for cell in record:
            if not cell.isascii():
                try:
                    cell.encode("utf-8")
                except UnicodeEncodeError:
                    return ReadError("the record is not UTF-8")
        return {k: v for k, v in zip(self.header, record) if v != ""}


class ParquetReader:
    """Only the columns the task reads, a record batch at a time; a null is a missing value."""

    def __init__(self, path: Path, columns: list[str]):
        pq = pyarrow_parquet()
        try:
            self.file = pq.ParquetFile(path)
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a foreign file
            raise InputError(f"{path} is not a Parquet file ({e})",
                             "pass a Parquet file, or name the format with --input-format") from e
        self.header = list(self.file.schema_arrow.names)
        self.columns = [c for c in columns if c in self.header]

    def count(self) -> int:
        return self.file.metadata.num_rows

    def chunk_starts(self, size: int, start: int = 0) -> list[tuple[int, None]]:
        return [(n, None) for n in range(start, self.count(), size)]  # rows() skips groups

    def rows(self, skip: int = 0, at: None = None) -> Iterator:
        meta = self.file.metadata
        group, before = 0, 0  # whole row groups before `skip` are not read at all
        while group < meta.num_row_groups and before + meta.row_group(group).num_rows <= skip:
            before += meta.row_group(group).num_rows
            group += 1
        drop = skip - before
        batches = self.file.iter_batches(batch_size=4096, columns=self.columns,
                                         row_groups=range(group, meta.num_row_groups))
        for batch in batches:
            for record in batch.to_pylist():
                if drop:
                    drop -= 1
                    continue
                yield record


def open_reader(path: Path, fmt: str, pipeline: type, columns: dict[str, str]):
    """The reader of `path` (checked by `input_format`), refused in one line when it cannot
    hold the task's inputs."""
    if fmt in ("jsonl", "text"):
        if fmt == "text" and not pipeline.is_json_input("a line", in_list=True):
            raise InputError(f"a plain-text file cannot hold {pipeline.task} inputs",
                             f"write JSONL, CSV or Parquet rows with "
                             f"{', '.join(pipeline.row_fields)}")
        return LineReader(path, fmt == "jsonl")
    reader = CsvReader(path) if fmt == "csv" else ParquetReader(path, list(columns.values()))
    present = {f: "x" for f, c in columns.items() if f != ID and c in reader.header}
    try:
        pipeline.input_of_row(present)
    except InputError as e:
        raise InputError(f"{path} has {e.problem} among its columns "
                         f"({', '.join(map(str, reader.header)) or 'none'})",
                         "rename the column, or pass --field NAME=COLUMN") from e
    return reader
