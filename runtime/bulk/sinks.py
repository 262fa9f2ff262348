"""Output of a bulk job, committed chunk by chunk: nothing lost, nothing doubled.

While a job runs its output lives in `OUT.partial/`, beside OUT:

    OUT.partial/commit.json   what the job is (input, model, parameters, chunking) and how far
                              it got: rows, errors, chunks, and the data's committed extent
    OUT.partial/data.jsonl    JSONL output: chunks appended, each written, flushed and fsynced
                              before commit.json says so
    OUT.partial/part-N.parquet  Parquet output: one file per chunk, renamed into place whole

commit.json is replaced atomically (written beside, fsynced, renamed) after the chunk's data is
on disk, so after a crash or `kill -9` it never claims more than the disk holds. Resuming
truncates data.jsonl to the committed bytes (a torn last chunk disappears), drops parts past the
committed count, and goes on from the committed row. At the end the output is moved to OUT in
one rename (Parquet: the parts are first merged, one row group each, into one file), so OUT is
only ever a complete output. The same input, model and flags give the same bytes, whether the
job ran in one go or was resumed: every chunk holds the same rows and is written the same way.
Every rename is runtime/core/atomic.py's (`write_file`, `install`); OUT.partial/ is the job's
own scratch, kept when the job stops so that `--resume` goes on from it.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.atomic import install, write_file
from ..core.errors import InputError
# numpy results (multi-vector's token vectors) are written as the lists they hold
from ..core.tensors import jsonable
from .readers import pyarrow_parquet
from .rows import SKIPPED

COMMIT = "commit.json"
PARTIAL = ".partial"
OUTPUT_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet",
                  ".pq": "parquet"}


def output_format(path: Path) -> str:
    """jsonl or parquet by `path`'s extension; any other is refused (an .xlsx or .csv output
    filled with JSONL would be a surprise found later)."""
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        named = f"{path.suffix} files" if path.suffix else "a file without an extension"
        raise InputError(f"--output {path}: bertonnx run writes JSONL or Parquet, not {named}",
                         "end FILE in .jsonl or .ndjson (JSONL), or .parquet or .pq (Parquet)")
    return fmt


def partial_dir(target: Path) -> Path:
    return target.with_name(target.name + PARTIAL)


@dataclass
class Commit:
    """How far a job got. `job` identifies the job (a resume must match it); `state` is the
    sink's own record of its committed data."""

    job: dict
    rows: int = 0     # input rows committed (a chunk's rows all at once)
    errors: int = 0   # error rows among them
    blank: int = 0    # blank lines among them: skipped, no output row
    chunks: int = 0
    state: dict = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        write_file(folder / COMMIT, json.dumps(asdict(self), sort_keys=True).encode())

    @classmethod
    def load(cls, folder: Path) -> "Commit | None":
        path = folder / COMMIT
        if not path.is_file():
            return None  # the job died before its first commit: nothing to keep
        try:
            return cls(**json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as e:
            raise InputError(f"{path} is damaged ({e})", "pass --force to start over") from e


class Sink:
    """Writes chunks of output rows ({"id", "result"} or {"id", "error"}) and commits them.

    crash_after: a test hook — after that many commits, write half of the next chunk and
    SIGKILL the process, as a power cut or `kill -9` mid-write would leave it.
    """

    def __init__(self, target: Path, commit: Commit, crash_after: int | None = None):
        self.target, self.commit, self.crash_after = target, commit, crash_after
        self.folder = partial_dir(target)

    def write(self, rows: list[dict]) -> None:
        """One chunk's output rows, a blank line's ({"id", "skipped"}) counted, not written."""
        kept = [r for r in rows if SKIPPED not in r]
        data = self.encode(kept)
        if self.crash_after is not None and self.commit.chunks >= self.crash_after:
            self.store(data[:len(data) // 2])
            os.kill(os.getpid(), 9)
        self.store(data)
        self.commit.rows += len(rows)
        self.commit.blank += len(rows) - len(kept)
        self.commit.errors += sum(1 for r in rows if "error" in r)
        self.commit.chunks += 1
        self.commit.save(self.folder)

    def encode(self, rows: list[dict]) -> bytes:
        raise NotImplementedError

    def store(self, data: bytes) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """The committed output becomes `target` in one rename; the partial folder goes."""
        raise NotImplementedError

    def _install(self, path: Path) -> None:
        install(path, self.target, durable=True)
        shutil.rmtree(self.folder)


class JsonlSink(Sink):
    DATA = "data.jsonl"

    def __init__(self, target: Path, commit: Commit, crash_after: int | None = None):
        super().__init__(target, commit, crash_after)
        path = self.folder / self.DATA
        self.file = open(path, "r+b" if path.exists() else "wb")
        size = self.file.seek(0, os.SEEK_END)
        committed = commit.state.setdefault("bytes", 0)
        if size < committed:
            self.file.close()
            raise InputError(f"{path} holds {size} bytes, fewer than the {committed} its "
                             "commit record names", "pass --force to start over")
        self.file.truncate(committed)  # a chunk written but never committed is dropped
        self.file.seek(committed)

    def encode(self, rows: list[dict]) -> bytes:
        return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"),
                                  default=jsonable) + "\n"
                       for r in rows).encode("utf-8")

    def store(self, data: bytes) -> None:
        self.file.write(data)
        self.file.flush()
        os.fsync(self.file.fileno())
        self.commit.state["bytes"] = self.file.tell()

    def finish(self) -> None:
        self.file.close()
        self._install(self.folder / self.DATA)

    def close(self) -> None:
        self.file.close()


class ParquetSink(Sink):
    """Columns id (int64, or string when the first chunk's ids are not all integers), result
    and error (null on the other). result is JSON text — a task's result varies in shape
    (fill-mask gives one list per mask) — except sentence vectors: list<float32>, which holds
    the library's float32 values exactly."""

    def __init__(self, target: Path, commit: Commit, crash_after: int | None = None,
                 vector: bool = False):
        super().__init__(target, commit, crash_after)
        self.pq = pyarrow_parquet()
        import pyarrow as pa  # lazy: the parquet extra's, present once pyarrow_parquet() passed

        self.pa, self.vector = pa, vector
        keep = {self._part(k).name for k in range(commit.chunks)}
        for p in self.folder.iterdir():  # parts past the commit, torn temporaries
            if p.name != COMMIT and p.name not in keep:
                p.unlink()

    def _part(self, k: int) -> Path:
        return self.folder / f"part-{k:08d}.parquet"

    def _schema(self):
        pa = self.pa
        ids = pa.string() if self.commit.state.get("id_type") == "string" else pa.int64()
        result = pa.list_(pa.float32()) if self.vector else pa.string()
        return pa.schema([("id", ids), ("result", result), ("error", pa.string())])

    def encode(self, rows: list[dict]) -> bytes:
        pa = self.pa
        ids = [r["id"] for r in rows]
        state = self.commit.state
        if "id_type" not in state and ids:  # fixed by the first rows, kept by a resume
            state["id_type"] = "int64" if all(isinstance(i, int) for i in ids) else "string"
        if state.get("id_type") == "string":
            ids = [i if isinstance(i, str) else str(i) for i in ids]
        elif not all(isinstance(i, int) for i in ids):
            bad = next(i for i in ids if not isinstance(i, int))
            raise InputError(f"id {bad!r} is not an integer like the ids before it, and a "
                             "Parquet column holds one type", "give every row an id of one "
                             "type, or write JSONL output")
        results = [r.get("result") for r in rows]
        if not self.vector:
            results = [None if "error" in r else
                       json.dumps(x, ensure_ascii=False, separators=(",", ":"),
                                  default=jsonable)
                       for r, x in zip(rows, results)]
        table = pa.table({"id": ids, "result": results,
                          "error": [r.get("error") for r in rows]}, schema=self._schema())
        out = pa.BufferOutputStream()
        self.pq.write_table(table, out)
        return out.getvalue().to_pybytes()

    def store(self, data: bytes) -> None:
        write_file(self._part(self.commit.chunks), data)

    def finish(self) -> None:
        merged = self.folder / "merged.parquet"
        with self.pq.ParquetWriter(merged, self._schema()) as writer:
            for k in range(self.commit.chunks):  # one part in memory at a time
                part = self.pq.read_table(self._part(k))
                # a chunk of blank lines only was written before the ids' type was known
                writer.write_table(part if part.num_rows else self._schema().empty_table())
            if not self.commit.chunks:
                writer.write_table(self._schema().empty_table())
        with open(merged, "rb") as f:
            os.fsync(f.fileno())
        self._install(merged)

    def close(self) -> None:
        pass


def _change(key: str, was: dict, now: dict) -> str:
    """`engine was cpu:f32, now openvino:int8` where both values are short, else the key."""
    a, b = (v if isinstance(v, str) else json.dumps(v) for v in (was.get(key), now.get(key)))
    return f"{key} was {a}, now {b}" if len(a + b) <= 60 else key


def open_sink(target: Path, job: dict, *, resume: bool, force: bool, vector: bool,
              crash_after: int | None = None) -> Sink | None:
    """The sink for `target`: a new job, or (`resume`) the stopped one in `target.partial`,
    which must be the same job. None: `resume` and `target` is already complete."""
    if resume and force:
        raise InputError("--resume and --force contradict each other",
                         "pass --resume to finish a stopped job, --force to start over")
    folder = partial_dir(target)
    commit = None
    if folder.exists():
        if force:
            shutil.rmtree(folder)
        else:
            commit = Commit.load(folder)
            if not resume:
                raise InputError(f"{folder} holds a job that stopped after "
                                 f"{commit.rows if commit else 0} rows",
                                 "pass --resume to finish it, or --force to start over")
            differ = sorted(k for k in {*job, *(commit.job if commit else {})}
                            if commit and commit.job.get(k) != job.get(k))
            if differ:
                raise InputError(f"{folder} holds a job with other settings "
                                 f"({'; '.join(_change(k, commit.job, job) for k in differ)})",
                                 "run it with the same input, model and flags to resume, or "
                                 "pass --force to start over")
    elif target.exists() and not force:
        if resume:
            return None
        raise InputError(f"{target} exists", "pass --force to replace it")
    folder.mkdir(exist_ok=True)
    commit = commit or Commit(job)
    if output_format(target) == "parquet":
        return ParquetSink(target, commit, crash_after, vector=vector)
    return JsonlSink(target, commit, crash_after)
