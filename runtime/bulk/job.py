"""A bulk job on one machine: read a chunk, run it, commit it — streaming, resumable.

    reader thread:  file -> raw rows -> Rows (the task's input rules)      two chunks ahead
    calling thread: ChunkRunner (the pipeline's length-sorted micro-batches)
    writer thread:  output rows -> JSON / Parquet -> write, fsync, commit   two chunks behind

onnxruntime and the tokenizers library release the GIL, so parsing and writing overlap the
model; the queues are bounded, so memory holds a few chunks whatever the file's size. Chunks
are fixed runs of `chunk_size` input rows: a resumed job runs exactly the chunks a clean one
would, and its output is byte for byte the same (runtime/bulk/sinks.py). With a `RayOptions`
the chunks run on a Ray cluster instead (runtime/bulk/ray_job.py), into the same sink.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..core.errors import BertOnnxError, InputError
from ..core.pipelines import Pipeline
from ..cli.progress import Progress
from .readers import chunks, input_format, open_reader
from .runner import ChunkRunner
from .sinks import Commit, open_sink, output_format, partial_dir

CRASH_ENV = "BERTONNX_BULK_CRASH_AFTER"  # test hook: SIGKILL mid-write after N commits
AHEAD = 2   # chunks read ahead of the model, and written behind it
CHUNK_SIZE = 1024  # rows per chunk when --chunk-size is left out (and no stopped job has one)


@dataclass(frozen=True)
class JobOptions:
    input: Path
    output: Path
    params: dict = field(default_factory=dict)   # the pipeline's arguments
    fields: dict = field(default_factory=dict)   # task field (or "id") -> the input's column
    input_format: str | None = None              # jsonl, csv, text, parquet; None: by name
    chunk_size: int | None = CHUNK_SIZE          # None: a resumed job's own, else CHUNK_SIZE
    on_error: str = "row"
    resume: bool = False
    force: bool = False
    progress: bool = True
    every: float = 10.0                          # seconds between plain progress lines
    max_errors: int = 0                          # error rows tolerated before exit status 1


@dataclass(frozen=True)
class Summary:
    output: str
    rows: int | None      # rows in the output (None: it was complete before this run)
    errors: int | None    # error rows among them
    new_rows: int         # rows this run wrote (the rest were committed before a resume)
    seconds: float
    resumed_from: int = 0
    warnings: int = 0     # repeats of a warning, shown once
    max_errors: int = 0   # error rows tolerated: past them the job failed (`check`)
    blank: int = 0        # blank input lines skipped (no output row), as `--input` skips them
    engine: str = ""      # what ran the rows, `engine:precision` (auto's pick for bulk work)

    @property
    def failed(self) -> bool:
        """More error rows than tolerated: the output is complete, the job is not a success."""
        return bool(self.errors) and self.errors > self.max_errors

    @property
    def rows_per_s(self) -> float:
        return self.new_rows / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        if self.rows is None:
            return f"{self.output} is complete: nothing to resume"
        resumed = f", resumed after row {self.resumed_from}" if self.resumed_from else ""
        blank = (f", {self.blank} blank line{'s' * (self.blank != 1)} skipped" if self.blank
                 else "")
        return (f"{self.rows} rows ({self.errors} errors{blank}) -> {self.output}: "
                f"{self.new_rows} rows in {self.seconds:.1f} s, {self.rows_per_s:.0f} rows/s"
                f"{f' on {self.engine}' if self.engine else ''}{resumed}")

    def as_dict(self) -> dict:
        return {**asdict(self), "rows_per_s": round(self.rows_per_s, 1), "failed": self.failed}

    def check(self) -> None:
        """RowsFailed when more rows failed than --max-errors tolerates (after the summary:
        the output holds every row, its error rows included)."""
        if self.failed:
            raise RowsFailed(f"{self.errors} of {self.rows} rows failed, more than --max-errors "
                             f"{self.max_errors} tolerates (their error rows are in "
                             f"{self.output})", f"fix those rows, or pass --max-errors "
                             f"{self.errors} to accept them")


class RowsFailed(BertOnnxError):
    """A job whose error rows are more than --max-errors: exit status 1, as --on-error fail."""

    exit_code = 1


class _Once(logging.Filter):
    """Lets each warning through once: a warning about one chunk (say, texts truncated) would
    otherwise repeat for every chunk."""

    def __init__(self):
        super().__init__()
        self.seen: set = set()
        self.repeats = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in self.seen:
            self.repeats += 1
            return False
        self.seen.add(record.msg)
        return True


def job_identity(pipe: Pipeline, options: JobOptions, fmt: str) -> dict:
    """What a resume must match: the input file as it was, the model, every flag that shapes
    a row's output or a chunk's rows."""
    st = options.input.stat()
    return json.loads(json.dumps({
        "input": str(options.input.resolve()), "input_size": st.st_size,
        "input_mtime_ns": st.st_mtime_ns, "input_format": fmt,
        "model": str(Path(pipe.folder.path).resolve()), "task": pipe.task,
        # rows of one output from one engine (auto's pick moves with the extras installed)
        "engine": pipe.session.config.key,
        "params": options.params, "fields": options.fields, "chunk_size": options.chunk_size,
        "batch_size": pipe.batch_size, "on_error": options.on_error}, default=repr,
        sort_keys=True))


def chunk_size(options: JobOptions) -> int:
    """--chunk-size; left out, the stopped job's own on --resume (its commit.json records it:
    a resume runs the same chunks), else CHUNK_SIZE."""
    if options.chunk_size is not None:
        return options.chunk_size
    commit = Commit.load(partial_dir(options.output)) if options.resume else None
    return commit.job.get("chunk_size", CHUNK_SIZE) if commit else CHUNK_SIZE


def run_job(pipe: Pipeline, options: JobOptions, cluster=None) -> Summary:
    """Run `pipe` over options.input into options.output (see the module docstring).

    cluster: a `RayOptions` (runtime/bulk/ray_job.py) runs the chunks on that Ray cluster, one
    pipeline per actor, into the same sink: the same output, byte for byte."""
    output_format(options.output)  # an unknown extension: refused before any work
    options = replace(options, chunk_size=chunk_size(options))
    fmt = input_format(options.input, options.input_format)
    if options.output.resolve() == options.input.resolve():
        raise InputError(f"--output {options.output} is the --input file",
                         "write the output to another file")
    runner = ChunkRunner(pipe, options.params, options.fields, options.on_error)
    reader = open_reader(options.input, fmt, type(pipe), runner.reader.columns())
    total = reader.count() if options.progress else None
    crash = os.environ.get(CRASH_ENV)
    remote = None
    if cluster is not None:  # joined before the sink exists: a cluster not found leaves nothing
        from .ray_job import RayStream

        remote = RayStream(cluster, pipe, runner, fmt, options)
    try:
        sink = open_sink(options.output, job_identity(pipe, options, fmt),
                         resume=options.resume, force=options.force,
                         vector=pipe.spec.vector_output,
                         crash_after=int(crash) if crash else None)
        if sink is None:  # --resume on a finished output: nothing left to do
            return Summary(str(options.output), None, None, 0, 0.0)
        return replace(_run(reader, runner, sink, options, total, remote),
                       engine=pipe.session.config.key)
    finally:
        if remote is not None:
            remote.close()


def _run(reader, runner: ChunkRunner, sink, options: JobOptions, total: int | None,
         remote) -> Summary:
    start, blank = sink.commit.rows, sink.commit.blank
    progress = Progress(total, options.output.name, initial=start, enabled=options.progress,
                        every=options.every, unit="row", rate=True)
    once = _Once()
    log = logging.getLogger("bertonnx")
    log.addFilter(once)
    t0 = time.monotonic()
    done = False
    try:
        if remote is None:
            _stream(chunks(reader.rows(start), options.chunk_size, start), runner, sink,
                    progress)
        else:
            remote.stream(start, sink, progress)
        sink.finish()
        done = True
    finally:
        sink.close()
        progress.close(final_line=done)
        log.removeFilter(once)
    seconds = time.monotonic() - t0
    c = sink.commit
    return Summary(str(options.output), c.rows - c.blank, c.errors,
                   c.rows - start - (c.blank - blank), seconds, start, once.repeats,
                   options.max_errors, c.blank)


def _stream(source, runner: ChunkRunner, sink, progress: Progress) -> None:
    def read_next():  # in the reader thread: parse, and read rows by the task's rules
        item = next(source, None)
        return None if item is None else runner.reader.rows(item[1], item[0])

    def write(out: list[dict]) -> None:
        sink.write(out)
        progress.set_postfix(errors=sink.commit.errors)
        progress.update(len(out))

    with ThreadPoolExecutor(1, "bulk-read") as reading, \
            ThreadPoolExecutor(1, "bulk-write") as writing:
        # one thread each: reads happen in file order, writes in chunk order
        ahead = deque(reading.submit(read_next) for _ in range(AHEAD))
        behind: deque = deque()
        try:
            while (chunk := ahead.popleft().result()) is not None:
                ahead.append(reading.submit(read_next))
                behind.append(writing.submit(write, runner.run(chunk)))
                while len(behind) > AHEAD:
                    behind.popleft().result()  # a failed write stops the job here
            while behind:
                behind.popleft().result()
        finally:
            for f in ahead:
                f.cancel()
