"""Bulk inference: a task over a whole file (JSONL, CSV, text, Parquet) into JSONL or Parquet,
streamed in chunks, committed as it goes, resumable after a crash (`bertonnx run`).

    from bertonnx.runtime import load
    from bertonnx.runtime.bulk import ChunkRunner, JobOptions, run_job

    run_job(load("out/sentiment"), JobOptions(Path("reviews.csv"), Path("labels.jsonl")))
    ChunkRunner(load("out/sentiment"), {"top_k": 2})(raw_rows)   # one chunk, e.g. in Ray

On a Ray cluster the same job is `run_job(pipe, options, RayOptions(address))`
(runtime/bulk/ray_job.py, `bertonnx run --ray`), and `bertonnx.runtime.bulk.ray.Predictor`
puts the pipeline into a user's own Ray Data job; both need `bertonnx[ray]` and are imported
only from there.

Torch-free; Parquet needs pyarrow (`bertonnx[parquet]`).
"""
from .job import JobOptions, Summary, run_job
from .readers import FORMATS
from .rows import ReadError, Row, RowReader
from .runner import ON_ERROR, ChunkRunner, RowFailed

__all__ = ["run_job", "JobOptions", "Summary", "ChunkRunner", "RowFailed", "RowReader", "Row",
           "ReadError", "FORMATS", "ON_ERROR"]
