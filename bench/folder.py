"""The `bertonnx bench FOLDER` preset: one export, and with `reference` its torch model and a
transformers pipeline on the same checkpoint, all through `run`."""
from __future__ import annotations

import json
from pathlib import Path

from bertonnx.runtime.core.defaults import resolve_checkpoint, resolve_export
from bertonnx.runtime.core.engines import choose, parse, runnable
from bertonnx.runtime.core.foreign import read_manifest

from .engines import onnx_engine, torch_engine, transformers_engine
from .footprint import cli_argv, transformers_script_argv
from .inputs import read_lines, task_inputs, text_set
from .report import Result
from .runner import BenchOptions, Workload, run


def engine_row(name: str, key: str) -> str:
    """The row of an export on an engine: the CPU provider's keeps the export's own name (the
    name every earlier report used), the others say theirs."""
    return name if key == "cpu:f32" else f"{name} [{key}]"


def streamed_rows(name: str, keys, threads: int, manifest) -> dict[str, str]:
    """{row: key} for the engine `auto` picks for this export when it is among `keys` and runs
    several calls at once at `threads`: the export as a bulk job loads it by default (OpenVINO:
    `bertonnx run --streams auto`, docs/engines.md "Streams"), end to end only. One row, not
    one per engine: each such session holds its streams' own memory (a fill-mask export's five
    sessions peaked at 3.0 GB against three's 1.6)."""
    key = choose(None, quantization=manifest.quantization.get("mode", "none"),
                 engines=manifest.engines, bulk=True).key
    n = parse(key).streams("auto", threads) if key in keys else 1
    return {f"{engine_row(name, key)} ({n} streams)": key} if n > 1 else {}


def bench_folder(folder: str | Path, *, reference: str | Path | None = None,
                 options: BenchOptions = BenchOptions(), texts_file: Path | None = None,
                 say=lambda m: None) -> Result:
    """Benchmark one export folder (and, with `reference`, its torch model and a transformers
    pipeline on the same checkpoint)."""
    folder = resolve_export(folder)  # `default`: the shipped export; as a reference, MiniLM
    reference = None if reference is None else resolve_checkpoint(reference)
    manifest = read_manifest(folder)
    task = manifest.task
    threads = options.n_threads
    source = read_lines(texts_file) if texts_file else None
    inputs = task_inputs(task, text_set(options.texts, source))

    mode = manifest.quantization.get("mode", "none")
    ours = (f"bertonnx {'fp32' if mode == 'none' else mode}{' fused' if manifest.optimized else ''}"
            if mode != "unknown" else f"bertonnx runtime, graph {manifest.exporter}")
    # every engine this machine can run the export with, side by side (runtime/core/engines.py)
    keys = runnable(mode, manifest.engines) if options.engines == "all" else [
        k.strip() for k in options.engines.split(",") if k.strip()]
    engines = [onnx_engine(engine_row(ours, k), folder, threads, providers=k) for k in keys]
    engines += [onnx_engine(engine_row(ours, k), folder, threads, providers=k, streams="auto")
                for k in streamed_rows(ours, keys, threads, manifest).values()]
    text = text_set(1, source)[0][:200]
    cold = {"bertonnx CLI": cli_argv(folder, task, text)}
    sizes = {ours: folder}
    if reference is not None:
        say("loading the torch references")
        engines.append(torch_engine(reference, task, threads, folder))
        engines.append(transformers_engine(reference, task, inputs,
                                           options.pipeline_batch_sizes))
        cold["transformers pipeline script"] = transformers_script_argv(reference, task, text)
        if Path(reference).is_dir():  # a hub id has no folder to measure
            sizes["reference checkpoint"] = Path(reference)
    workload = Workload(task, json.loads((folder / "config.json").read_text(encoding="utf-8")),
                        inputs, folder,
                        baseline=engines[-1].name if reference is not None else engines[0].name,
                        cold_starts=cold, folders=sizes)
    return run(engines, options, workload, say)
