"""A bertonnx pipeline inside Ray Data, and an export folder made available to every node.

    import ray
    from bertonnx.runtime.bulk.ray import Predictor, ship

    ds = ray.data.read_parquet("s3://bucket/reviews/")
    ds = ds.map_batches(Predictor, fn_constructor_kwargs={"folder": ship("out/sentiment"),
                                                          "params": {"top_k": 2}},
                        concurrency=4, batch_size=1024, batch_format="pyarrow")
    # every input column, plus "result" (JSON text; sentence vectors: float32 lists) and
    # "error" (null, or what is wrong with the row)

`Predictor` is a Ray Data callable class: each actor loads the export once and runs each batch
through `ChunkRunner` (runtime/bulk/runner.py), the per-chunk function of `bertonnx run` — rows
read by the task's own rules, a bad row an error row, the rest in length-sorted micro-batches.

An export folder reaches the nodes one of two ways. A path (str or Path) must exist on every
node. `ship(path)` puts the folder's files in Ray's object store once, from the driver; a node
on which the same path holds the same files (same fingerprint) uses it in place, any other
copies the files out of the object store into a folder under its temp dir, once per node
(`folder_on_node`). Needs the ray extra (`pip install 'bertonnx[ray]'`).
"""
from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..core.atomic import discard, publishing
from ..core.errors import ArtifactError, ConfigError
from ..core.pipelines import DEFAULT_BATCH_SIZE, load
from .rows import ID
from .runner import ChunkRunner

log = logging.getLogger("bertonnx")

PART = 64 << 20  # a file goes into the object store in parts of this size (bounded objects)
SHIPPED = "bertonnx-ray"  # folder under the node's temp dir that holds materialised exports


def ray_module():
    """ray, or one line naming the extra that brings it."""
    try:
        import ray
        import ray.data  # noqa: F401  (the Data library: `ray` alone is not enough)
    except ImportError as e:
        raise ConfigError("--ray needs the ray extra", "pip install 'bertonnx[ray]'") from e
    return ray


def _files(folder: Path) -> list[str]:
    """Every regular file under `folder`, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def fingerprint(folder: Path) -> str:
    """sha256 over every file's relative path and contents: equal folders, equal prints."""
    whole = hashlib.sha256()
    for name in _files(folder):
        digest = hashlib.sha256()
        with open(folder / name, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        whole.update(f"{name}\0{digest.hexdigest()}\n".encode())
    return whole.hexdigest()


@dataclass(frozen=True)
class ShippedFolder:
    """An export folder in the object store: `path` on the driver, its `fingerprint`, and
    each file (relative path) as a list of object refs to its parts."""

    path: str
    fingerprint: str
    files: Mapping[str, tuple]


def ship(path: str | Path, put: Callable | None = None) -> ShippedFolder:
    """The folder at `path` (an export folder, `default` is resolved by `load` on the node)
    with its files put into the object store (`put`: ray.put; the driver must be connected)."""
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise ArtifactError(f"export folder {path} does not exist", "check the path")
    put = put or ray_module().put
    files = {}
    for name in _files(folder):
        parts = []
        with open(folder / name, "rb") as f:
            while True:
                part = f.read(PART)
                parts.append(put(part))
                if len(part) < PART:
                    break
        files[name] = tuple(parts)
    return ShippedFolder(str(folder), fingerprint(folder), files)


def folder_on_node(folder: str | Path | ShippedFolder, root: Path | None = None,
                   get: Callable | None = None) -> Path:
    """Where this node finds `folder`: a plain path as is; a shipped folder in place when this
    node's copy at the same path has the same fingerprint, else materialised under `root`
    (default: the temp dir's bertonnx-ray/)."""
    if not isinstance(folder, ShippedFolder):
        return Path(folder)
    here = Path(folder.path)
    if here.is_dir():
        if fingerprint(here) == folder.fingerprint:
            return here
        log.warning("%s on this node differs from the driver's; using the shipped copy", here)
    return materialise(folder, root, get)


def materialise(folder: ShippedFolder, root: Path | None = None,
                get: Callable | None = None) -> Path:
    """The shipped files written to `root/FINGERPRINT/` (`get`: ray.get), once per node: the
    files are written to a hidden folder beside it and renamed into place whole
    (runtime/core/atomic.py), so an actor never sees a half-written copy, and two actors
    racing leave one copy: the first renamed in is kept (another actor may be loading from it)."""
    root = Path(root or Path(tempfile.gettempdir()) / SHIPPED)
    target = root / folder.fingerprint
    if target.is_dir() and fingerprint(target) == folder.fingerprint:
        return target
    get = get or ray_module().get
    with publishing(target, keep_existing=True) as tmp:
        for name, refs in folder.files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                for ref in refs:  # one part in memory at a time
                    f.write(get(ref))
        if fingerprint(tmp) != folder.fingerprint:
            raise ArtifactError(f"the shipped copy of {folder.path} does not match its "
                                "fingerprint", "export the model again and rerun")
        if target.is_dir() and fingerprint(target) != folder.fingerprint:
            discard(target)  # a damaged copy from before (a good one just renamed in is kept)
    return target


def chunk_runner(folder, params: dict | None, fields: Mapping | None, on_error: str,
                 threads: int | None, providers, batch_size: int | None,
                 streams: int | str = "auto") -> ChunkRunner:
    """A ChunkRunner on this node's copy of `folder` (what each actor builds once)."""
    pipe = load(folder_on_node(folder), providers=providers, threads=threads,
                batch_size=batch_size or DEFAULT_BATCH_SIZE, streams=streams, bulk=True)
    return ChunkRunner(pipe, dict(params or {}), dict(fields or {}), on_error)


class Predictor:
    """A Ray Data callable class (`ds.map_batches(Predictor, fn_constructor_kwargs=...)`): one
    pipeline per actor, any batch format (numpy dict, pandas, pyarrow) in, the same format out
    with `result` and `error` columns added.

    folder: an export folder path on every node, or `ship(path)`. params: the pipeline's
    arguments (top_k, ...). fields: task field -> column ({"text": "review"}); other columns
    pass through untouched, an `id` column among them. threads: onnxruntime threads per actor
    (give the actor as many CPUs: `num_cpus=`); streams: its calls at once, as `load`'s
    ("auto", a batch job's); `auto`'s engine is the one for bulk work (load's `bulk`). on_error
    "fail" raises on a bad row instead.
    """

    def __init__(self, folder, params: dict | None = None, fields: Mapping | None = None, *,
                 threads: int | None = 1, providers=None, batch_size: int | None = None,
                 on_error: str = "row", streams: int | str = "auto"):
        self.runner = chunk_runner(folder, params, fields, on_error, threads, providers,
                                   batch_size, streams)
        self.vector = self.runner.pipeline.spec.vector_output
        id_column = dict(fields or {}).get(ID, ID)
        # the id column is the user's to carry: not read, so no row fails on its type
        self.skip = {id_column}

    def __call__(self, batch):
        records = _records(batch)
        rows = [self.runner.reader.row({k: v for k, v in r.items() if k not in self.skip}, i)
                for i, r in enumerate(records)]
        out = self.runner.run(rows)
        errors = [o.get("error") for o in out]
        results = [None if "error" in o else self._result(o["result"]) for o in out]
        return _with_columns(batch, results, errors, self.vector)

    def _result(self, value):
        if self.vector:
            return np.asarray(value, dtype=np.float32)
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _records(batch) -> list[dict]:
    """A batch (numpy dict, pandas DataFrame, pyarrow Table) as plain-Python row dicts."""
    import pyarrow as pa  # lazy: the ray extra's; ship() and materialise() work without it

    if isinstance(batch, pa.Table):
        return batch.to_pylist()
    if isinstance(batch, Mapping):
        columns = {k: v.tolist() if hasattr(v, "tolist") else list(v) for k, v in batch.items()}
        n = len(next(iter(columns.values()), []))
        return [{k: v[i] for k, v in columns.items()} for i in range(n)]
    # pandas: through Arrow, so NaN and None both become a missing value
    return pa.Table.from_pandas(batch, preserve_index=False).to_pylist()


def _with_columns(batch, results: list, errors: list, vector: bool):
    import pyarrow as pa  # lazy: the ray extra's; ship() and materialise() work without it

    if isinstance(batch, pa.Table):
        kind = pa.list_(pa.float32()) if vector else pa.string()
        for name, values, typ in (("result", results, kind), ("error", errors, pa.string())):
            column = pa.array([None if v is None else v for v in values], type=typ)
            if name in batch.column_names:
                batch = batch.set_column(batch.column_names.index(name), name, column)
            else:
                batch = batch.append_column(name, column)
        return batch
    if isinstance(batch, Mapping):
        out = dict(batch)
        out["result"] = np.array(results + [None], dtype=object)[:-1]  # never a 2-D array
        out["error"] = np.array(errors, dtype=object)
        return out
    return batch.assign(result=results, error=errors)
