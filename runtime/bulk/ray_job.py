"""`bertonnx run --ray ADDRESS`: the bulk job on a Ray cluster, with Ray Data.

    driver's node   read tasks, one per chunk: the job's own readers on the driver's file,
                    from the chunk's byte offset (`chunk_starts`) -> a block {row, raw}
    any node        actors, one pipeline each (ChunkRunner): rows read by the task's rules,
                    run, one output row per input row -> a block {row, out, node}
    driver          the mapped dataset consumed in input order (preserve_order); row numbers
                    checked (none missing, none twice); chunks of --chunk-size rows into the
                    same committing sink as a local job (runtime/bulk/sinks.py)

So the output is the local job's, byte for byte — every batch an actor runs is one of the
job's chunks, as in a local run — and `--resume` works the same. The input file need only
exist on the driver's node; the export folder is shipped through the object store and used in
place by a node that has the same files at the same path (runtime/bulk/ray.py).

A worker node lost mid-job: Ray restarts its actors elsewhere (max_restarts) and retries their
batches (max_task_retries). Should Ray give up instead (an actor unreachable mid-batch fails the
dataset), the driver starts a new dataset from its last commit, up to `attempts` times. Only
the driver writes, in order, after checking the row numbers: no row is lost or doubled.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from ..core.atomic import write_file
from ..core.errors import BertOnnxError, ConfigError, InputError
from ..core.pipelines import Pipeline
from ..cli.progress import Progress
from ..ray.cluster import join
from .ray import chunk_runner, ray_module, ship
from .readers import open_reader
from .rows import BLANK, Blank, ReadError, RowReader
from .runner import ChunkRunner, fail_on_error

ray = ray_module()  # one line naming the extra when ray is missing (this module needs it)
from ray.data import Datasource  # noqa: E402
from ray.data.block import BlockMetadata  # noqa: E402
from ray.data.datasource import ReadTask  # noqa: E402
from ray.util.annotations import RayDeprecationWarning  # noqa: E402

log = logging.getLogger("bertonnx")

# test hook "NODES:DIR": once rows from NODES nodes are committed, the driver writes
# DIR/paused.json (rows committed, rows per node) and waits for DIR/go, so that a test kills a
# node at a known point of the job, after it did part of the work (_Pause)
PAUSE_ENV = "BERTONNX_RAY_PAUSE_AFTER"
PAUSE_LIMIT = 300.0  # seconds the hook waits for DIR/go


class ClusterLost(BertOnnxError):
    """Work lost with nodes `attempts` times over: the job stops, its commits kept (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class RayOptions:
    address: str = "auto"        # a cluster's address (host:port), or "auto": the local one
    actors: int | None = None    # actors (pipelines); None: the cluster's CPUs // cpus each
    max_restarts: int = 3        # per actor, after its process or node dies
    max_task_retries: int = 3    # per batch, after its actor died running it
    attempts: int = 3            # fresh datasets the driver starts should Ray give up
    wait_s: float = 600.0        # for every actor to be up before the first chunk is sent


class FileRows(Datasource):
    """The input file's rows from `start` on: one read task per chunk of `size` rows, each
    reading its chunk alone (from its byte offset, `chunk_starts`) with the job's readers
    into one block {row: int64, raw: the raw row as JSON text}, on the driver's node only."""

    def __init__(self, path: Path, fmt: str, pipeline: type, columns: dict, start: int,
                 size: int):
        super().__init__()
        self.args = (path, fmt, pipeline, columns)
        self.size = size
        self.starts = open_reader(path, fmt, pipeline, columns).chunk_starts(size, start)

    @property
    def supports_distributed_reads(self) -> bool:
        return False  # the file is the driver's: read it on the driver's node only

    def estimate_inmemory_data_size(self):
        return None

    def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
        meta = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
        # each task carries its own few arguments, not this object and its list of starts
        return [ReadTask(functools.partial(_read_chunk, *self.args, first, at, self.size), meta)
                for first, at in self.starts]


def _read_chunk(path: Path, fmt: str, pipeline: type, columns: dict, first: int, at,
                size: int) -> list[pa.Table]:
    reader = open_reader(path, fmt, pipeline, columns)
    raws = list(itertools.islice(reader.rows(first, at), size))
    rows = RowReader(pipeline, columns)
    return [pa.table({"row": pa.array(range(first, first + len(raws)), pa.int64()),
                      "raw": pa.array([_raw_text(rows, r, first + i) for i, r in enumerate(raws)],
                                      pa.string())})]


# Rows and results cross to the actors and back as JSON text, never pickles: the runtime
# unpickles nothing (tests/reliability/test_artifacts.py). Floats survive JSON exactly.
def _raw_text(rows: RowReader, raw, number: int) -> str:
    """A raw row as JSON: ["raw", value], ["blank", null] for a blank line, or ["error",
    message] for a row the reader could not read or holding a value JSON cannot carry (a
    Parquet date, bytes: no valid id or text is one, so the row reader names it)."""
    if isinstance(raw, Blank):
        return json.dumps(["blank", None])
    if not isinstance(raw, ReadError):
        try:
            return json.dumps(["raw", raw])
        except (TypeError, ValueError) as e:
            raw = ReadError(rows.row(raw, number).error or f"the row holds a value that is "
                                                          f"neither text nor a number ({e})")
    return json.dumps(["error", raw.message])


def _raw_value(text: str):
    kind, value = json.loads(text)
    return ReadError(value) if kind == "error" else BLANK if kind == "blank" else value


class _JobWorker:
    """A Ray Data actor of the job: one ChunkRunner, error rows always (the driver applies
    --on-error fail in input order, as a local job would)."""

    def __init__(self, folder, params, fields, threads, providers, batch_size, streams):
        self.node = ray.get_runtime_context().get_node_id()
        self.failed = None
        try:
            self.runner = chunk_runner(folder, params, fields, "row", threads, providers,
                                       batch_size, streams)
        except BertOnnxError as e:
            # raised from the first batch instead: a task's error reaches the driver whole
            # (one line), where an actor that dies in __init__ is restarted again and again
            self.failed = e

    def __call__(self, batch):
        if self.failed is not None:
            raise self.failed
        numbers = batch.column("row").to_pylist()
        raws = [_raw_value(t) for t in batch.column("raw").to_pylist()]
        out = self.runner.run([self.runner.reader.row(r, n) for r, n in zip(raws, numbers)])
        return pa.table({"row": batch.column("row"),
                         "out": pa.array([json.dumps(o) for o in out], pa.string()),
                         "node": pa.array([self.node] * len(out), pa.string())})


def _chain(e: BaseException):
    """`e` and every exception it wraps (Ray's RayTaskError.cause, __cause__, __context__)."""
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = getattr(e, "cause", None) or e.__cause__ or e.__context__
    return seen


def _lost(e: BaseException) -> bool:
    """Work lost with a node or a process (worth a new attempt), not a failure of the job's."""
    x = ray.exceptions
    if isinstance(e, x.RayActorError):
        return not e.actor_init_failed
    return isinstance(e, (x.NodeDiedError, x.ObjectLostError, x.WorkerCrashedError))


class RayStream:
    """The job's rows through a Ray cluster, into a sink (what `run_job` streams with)."""

    def __init__(self, cluster: RayOptions, pipe: Pipeline, runner: ChunkRunner, fmt: str,
                 options):
        self.cluster, self.pipe, self.runner, self.fmt = cluster, pipe, runner, fmt
        self.options = options
        self.owned = not ray.is_initialized()
        # until close(): Ray prints its raylets' messages to stdout, which is for the summary;
        # Ray Data's own log (its errors are ours to report, in one line) shows with --debug
        self.quiet = contextlib.ExitStack()
        self.quiet.enter_context(contextlib.redirect_stdout(sys.stderr))
        if not log.isEnabledFor(logging.DEBUG):
            self.quiet.enter_context(_levels({"ray.data": logging.CRITICAL}))
        try:
            self._join()
        except BaseException:
            self.quiet.close()
            raise

    def _join(self) -> None:
        cluster, pipe = self.cluster, self.pipe
        if self.owned:
            join(cluster.address)
        self.folder = ship(pipe.folder.path)
        self.cpus = pipe.session.config.threads or 1  # onnxruntime threads and CPUs per actor
        total = int(ray.cluster_resources().get("CPU", 1))
        self.actors = cluster.actors or max(1, total // self.cpus)
        if self.actors * self.cpus > total:
            log.warning("the Ray cluster has %d CPUs: %d actors of %d CPUs wait for more "
                        "(up to %.0f s)", total, self.actors, self.cpus, cluster.wait_s)
        self.nodes: Counter = Counter()

    def dataset(self, start: int, wait: bool):
        """The job's rows from `start` (a chunk boundary) through the actors; `wait`: start
        only once every actor is up (so every node gets work from the first chunks)."""
        o, pipe = self.options, self.pipe
        source = FileRows(o.input, self.fmt, type(pipe), self.runner.reader.columns(), start,
                           o.chunk_size)
        # one block per chunk, not split further; 0 CPUs: reading is light, and a CPU it held
        # could be the one an actor restarts on after a node is lost
        ds = ray.data.read_datasource(source, num_cpus=0, concurrency=2,
                                           override_num_blocks=max(1, len(source.starts)))
        args = dict(
            batch_size=o.chunk_size, batch_format="pyarrow", zero_copy_batch=True,
            fn_constructor_kwargs=dict(
                folder=self.folder, params=o.params, fields=o.fields, threads=self.cpus,
                providers=pipe.session.config.key, batch_size=pipe.batch_size,
                streams=pipe.session.config.streams),   # each actor's, within its threads
            compute=ray.data.ActorPoolStrategy(size=self.actors), num_cpus=self.cpus)
        retries = dict(max_restarts=self.cluster.max_restarts,
                       max_task_retries=self.cluster.max_task_retries)
        with warnings.catch_warnings():
            # Ray Data 2.60 calls max_restarts/max_task_retries "ray_remote_args", deprecated,
            # to go in 2.64; until then they are the only way to set them. Once Ray refuses
            # them, its own defaults apply (restart and retry without end).
            warnings.simplefilter("ignore", RayDeprecationWarning)
            try:
                ds = ds.map_batches(_JobWorker, **args, **retries)
            except TypeError:
                ds = ds.map_batches(_JobWorker, **args)
        ctx = ds.context
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        ctx.wait_for_min_actors_s = self.cluster.wait_s if wait else -1
        return ds

    def stream(self, start: int, sink, progress: Progress) -> None:
        """Rows `start`... from the cluster, committed in chunks of chunk_size."""
        pause = _Pause.from_env()
        for attempt in range(self.cluster.attempts):
            # from the last commit, so that every batch is one of the job's chunks, as in a
            # local run: a row's result never depends on a different batch
            first = sink.commit.rows
            try:
                self._consume(self.dataset(first, wait=attempt == 0), first, sink, progress,
                              pause)
                return
            except BertOnnxError:
                raise
            except Exception as e:  # Ray's: ours inside, a cluster too small, a lost node
                chain = _chain(e)
                ours = next((x for x in chain if isinstance(x, BertOnnxError)), None)
                if ours is not None:
                    raise ours from e
                if any(isinstance(x, ray.exceptions.GetTimeoutError) for x in chain):
                    raise ConfigError(f"the Ray cluster did not start {self.actors} actors of "
                                      f"{self.cpus} CPUs each in {self.cluster.wait_s:.0f} s",
                                      "pass fewer --actors (or --threads), or add nodes") from e
                if not any(_lost(x) for x in chain):
                    raise
                if attempt + 1 == self.cluster.attempts:
                    raise ClusterLost(f"the Ray cluster lost work {self.cluster.attempts} times "
                                      f"({type(e).__name__}); rows 0-{sink.commit.rows - 1} "
                                      "are committed", "rerun with --resume when the cluster "
                                      "is sound") from e
                log.warning("Ray lost work (%s); going on from row %d", type(e).__name__,
                            sink.commit.rows)

    def _consume(self, ds, first: int, sink, progress: Progress, pause) -> None:
        """The dataset's rows in input order (checked: none missing, none twice), committed
        chunk by chunk; a short last chunk at the end."""
        size, fail = self.options.chunk_size, self.options.on_error == "fail"
        pending: list[tuple[dict, str]] = []  # (output row, node that ran it)
        expected = first
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            rows = batch.column("row").to_pylist()
            if rows != list(range(expected, expected + len(rows))):
                raise RuntimeError(f"Ray returned rows {rows[0]}..{rows[-1]} where row "
                                   f"{expected} was due")  # never, with preserve_order
            expected += len(rows)
            pending.extend(zip((json.loads(t) for t in batch.column("out").to_pylist()),
                               batch.column("node").to_pylist()))
            while len(pending) >= size:
                self._commit(sink, progress, pending[:size], fail)
                del pending[:size]
                if pause:
                    pause.check(sink.commit, self.nodes)
        if pending:
            self._commit(sink, progress, pending, fail)
        log.debug("Ray Data: %s", ds.stats())

    def _commit(self, sink, progress: Progress, chunk: list[tuple[dict, str]],
                fail: bool) -> None:
        out = [o for o, _ in chunk]
        if fail:
            fail_on_error(range(sink.commit.rows, sink.commit.rows + len(out)), out)
        sink.write(out)
        self.nodes.update(node for _, node in chunk)
        progress.set_postfix(errors=sink.commit.errors)
        progress.update(len(out))

    def close(self) -> None:
        try:
            if self.owned and ray.is_initialized():
                ray.shutdown()
        finally:
            self.quiet.close()


@contextlib.contextmanager
def _levels(levels: dict[str, int]):
    """Loggers set to levels for the block, then put back."""
    saved = {name: logging.getLogger(name).level for name in levels}
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


@dataclass
class _Pause:
    """The test hook (PAUSE_ENV "NODES:DIR"): after the first commit by which rows from NODES
    nodes are committed, write DIR/paused.json and wait for DIR/go."""

    nodes: int
    folder: Path
    done: bool = False

    @classmethod
    def from_env(cls) -> "_Pause | None":
        value = os.environ.get(PAUSE_ENV)
        if not value:
            return None
        nodes, _, folder = value.partition(":")
        return cls(int(nodes), Path(folder))

    def check(self, commit, nodes: Counter) -> None:
        if self.done or len(nodes) < self.nodes:
            return
        self.done = True
        # whole or absent: the test reads it the moment it exists (a plain write_text let it
        # read an empty file once, in CI)
        write_file(self.folder / "paused.json", json.dumps(
            {"rows": commit.rows, "chunks": commit.chunks, "nodes": dict(nodes)}).encode())
        deadline = time.monotonic() + PAUSE_LIMIT
        while not (self.folder / "go").exists():
            if time.monotonic() > deadline:
                raise InputError(f"{PAUSE_ENV}: nobody created {self.folder / 'go'}")
            time.sleep(0.02)
