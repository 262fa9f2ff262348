"""The full comparison behind BENCHMARKS.md: bertonnx vs torch, transformers and Optimum.

    python benchmarks/bench.py                     # MiniLM, the whole table (minutes)
    python benchmarks/bench.py --quick --model DIR # any small text-classification checkpoint

One checkpoint feeds every engine: all-MiniLM-L6-v2 (the bundled default) with a 3-label
classification head drawn once with a fixed seed and saved, so the torch model, the
transformers pipeline, Optimum and bertonnx all run identical weights. From it:

    bertonnx export (fp32 fused)      bertonnx export --quantize int8
    Optimum: ORTModel export → ORTOptimizer O2 (fp32)
             ORTQuantizer dynamic int8 (avx2 config) of the plain export; the O2 graph is
             tried first and its failure recorded (ORTQuantizer cannot type the fused
             graph's tensors: "Unable to find data type for weight_name ...")

then `bertonnx.export.bench` times them round-robin in one process (end to end on the same
texts, model-only latency and throughput on the same feeds) and cold-starts each CLI/script.
Public APIs only: bertonnx, transformers, optimum, onnxruntime. Optimum is the optional
`bench` extra; without it those rows are left out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from bertonnx.export import ExportOptions, export_model
from bertonnx.export import bench as B
from bertonnx.runtime.manifest import Manifest
from bertonnx.runtime.tokenizer import load_tokenizer

TASK = "text-classification"
LABELS = {0: "negative", 1: "neutral", 2: "positive"}  # the tweets' sentiment classes
SEED = 0


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# -- artifacts -----------------------------------------------------------------------------

def checkpoint(model: str, work: Path) -> Path:
    """A text-classification checkpoint every engine loads. `default`: MiniLM + seeded head."""
    if model != "default":
        return Path(model)
    out = work / "checkpoint"
    if (out / "model.safetensors").is_file():
        return out
    import torch

    from bertonnx.build import default_model_dir, load_pretrained, save_pretrained

    torch.manual_seed(SEED)
    m = load_pretrained(default_model_dir(), TASK, id2label=LABELS)
    save_pretrained(m, out)
    return out


def ours(ckpt: Path, work: Path, quantize: str, fresh: bool, int8: str | None = None) -> Path:
    """Our export (reused when its manifest says it is the same source and settings).
    `int8`: "default" or "per_channel,QInt8,reduce_range"-style overrides of Int8Settings."""
    from bertonnx.export.quantize import Int8Settings

    settings = None
    if quantize == "int8" and int8 not in (None, "default"):
        words = set(int8.split(","))
        settings = Int8Settings(per_channel="per_channel" in words,
                                weight_type="QInt8" if "QInt8" in words else "QUInt8",
                                reduce_range="reduce_range" in words)
    tag = "" if settings is None else "-" + int8.replace(",", "-")
    out = work / f"bertonnx-{'fp32' if quantize == 'none' else quantize}{tag}"
    if not fresh and (out / "bertonnx.json").is_file():
        m = Manifest.read(out, verify=False)
        if m.source == str(ckpt) and m.quantization.get("mode") == quantize:
            return out
    say(f"bertonnx export --quantize {quantize} {int8 or ''} -> {out}")
    export_model(ckpt, TASK, out, ExportOptions(quantize=quantize, force=True, int8=settings))
    return out


def optimum_artifacts(ckpt: Path, work: Path, fresh: bool) -> dict:
    """Optimum's documented CPU path: export, O2-optimise (fp32), dynamic int8 (avx2 config).

    Returns {"fp32": (dir, file), "int8": (dir, file), "notes": [...]}."""
    from optimum.onnxruntime import ORTModelForSequenceClassification, ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoOptimizationConfig, AutoQuantizationConfig

    plain, o2, int8 = work / "optimum-plain", work / "optimum-O2", work / "optimum-int8"
    notes = []
    if fresh:
        for d in (plain, o2, int8):
            shutil.rmtree(d, ignore_errors=True)
    if not (plain / "model.onnx").is_file():
        say("optimum export")
        m = ORTModelForSequenceClassification.from_pretrained(ckpt, export=True)
        m.save_pretrained(plain)
        _copy_tokenizer(ckpt, plain)
    if not (o2 / "model_optimized.onnx").is_file():
        say("optimum O2 optimisation")
        m = ORTModelForSequenceClassification.from_pretrained(plain)
        ORTOptimizer.from_pretrained(m).optimize(save_dir=o2,
                                                 optimization_config=AutoOptimizationConfig.O2())
        _copy_tokenizer(ckpt, o2)
    if not (int8 / "model_quantized.onnx").is_file():
        qc = AutoQuantizationConfig.avx2(is_static=False, per_channel=False)
        try:  # the fused graph first: the obvious path, and the one that fails
            ORTQuantizer.from_pretrained(o2, file_name="model_optimized.onnx").quantize(
                save_dir=work / "optimum-O2-int8", quantization_config=qc)
            notes.append("ORTQuantizer on the O2 graph worked")
        except Exception as e:  # noqa: BLE001 — recorded, then the working path is taken
            notes.append(f"ORTQuantizer on the O2 graph failed: {str(e).splitlines()[0][:160]}")
        shutil.rmtree(work / "optimum-O2-int8", ignore_errors=True)
        say("optimum int8 (dynamic, avx2 config, of the plain export)")
        ORTQuantizer.from_pretrained(plain, file_name="model.onnx").quantize(
            save_dir=int8, quantization_config=qc)
        _copy_tokenizer(ckpt, int8)
        (work / "optimum-notes.json").write_text(json.dumps(notes))
    elif (work / "optimum-notes.json").is_file():
        notes = json.loads((work / "optimum-notes.json").read_text())
    return {"fp32": (o2, "model_optimized.onnx"), "int8": (int8, "model_quantized.onnx"),
            "notes": notes}


def _copy_tokenizer(src: Path, dst: Path) -> None:
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                 "special_tokens_map.json"):
        if (src / name).is_file() and not (dst / name).is_file():
            shutil.copy2(src / name, dst / name)


# -- Optimum engines -----------------------------------------------------------------------

def optimum_engine(name: str, folder: Path, file_name: str, inputs: list, threads: int,
                   batch_sizes, quantized: bool) -> B.Engine:
    """ORTModel inside a transformers pipeline (end to end) and its raw session (model only),
    with the same thread count as ours."""
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForSequenceClassification
    from transformers import AutoTokenizer, pipeline

    from bertonnx.runtime.session import create_session

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    model = ORTModelForSequenceClassification.from_pretrained(folder, file_name=file_name,
                                                              session_options=so)
    tok = AutoTokenizer.from_pretrained(folder)
    engine = B.hf_pipeline_engine(
        name, lambda bs: pipeline(TASK, model=model, tokenizer=tok, device=-1, batch_size=bs),
        TASK, inputs, batch_sizes, B.model_max_length(folder), quantized=quantized)
    session = create_session(folder / file_name, threads=threads).inner
    wanted = [i.name for i in session.get_inputs()]
    engine.forward = lambda feeds: session.run(None, {k: feeds[k] for k in wanted})
    return engine


def optimum_script_argv(folder: Path, file_name: str, text: str) -> list[str]:
    code = ("import sys\n"
            "from optimum.onnxruntime import ORTModelForSequenceClassification\n"
            "from transformers import AutoTokenizer, pipeline\n"
            "m = ORTModelForSequenceClassification.from_pretrained(sys.argv[1], "
            "file_name=sys.argv[2])\n"
            "p = pipeline('text-classification', model=m, "
            "tokenizer=AutoTokenizer.from_pretrained(sys.argv[1]))\n"
            "print(p(sys.argv[3]))\n")
    return [sys.executable, "-c", code, str(folder), file_name, text]


# -- targets -------------------------------------------------------------------------------

def targets(r: B.Report, names: dict) -> dict:
    """Each target of the issue: the measured ratio, the bound, and whether it holds."""
    e2e, thr, lat, cold = r.end_to_end, r.throughput, r.latency, r.cold_start
    out = {}

    def add(key, value, bound, higher_is_better=True):
        if value is None:
            return
        ok = value >= bound if higher_is_better else value <= bound
        out[key] = {"value": value, "bound": bound, "met": bool(ok),
                    "rule": ("≥ " if higher_is_better else "≤ ") + f"{bound:g}"}

    def ips(n):
        return e2e[n]["items_per_s"] if n in e2e else None

    def div(a, b):
        return a / b if a is not None and b else None

    fp32, int8 = names["fp32"], names["int8"]
    shape = f"b={r.options['batch']} s={r.options['batch_seq']}"
    hf = next((n for n in e2e if n.startswith("transformers")), None)
    o32 = next((n for n in e2e if n.startswith("Optimum O2")), None)
    o8 = next((n for n in e2e if n.startswith("Optimum int8")), None)
    best_ours = max((ips(fp32) or 0, ips(int8) or 0))
    add("end to end: bertonnx fp32 / transformers pipeline", div(ips(fp32), ips(hf)), 3.0)
    add("end to end: bertonnx int8 / transformers pipeline", div(ips(int8), ips(hf)), 3.0)
    add("end to end: bertonnx fp32 / Optimum O2 pipeline", div(ips(fp32), ips(o32)), 1.5)
    add("end to end: bertonnx int8 / Optimum int8 pipeline", div(ips(int8), ips(o8)), 1.5)
    add("end to end: best bertonnx / best Optimum pipeline",
        div(best_ours, max(ips(o32) or 0, ips(o8) or 0) or None), 1.5)
    if fp32 in thr and thr[fp32]["pct_peak"] is not None:
        add(f"{shape}: bertonnx fp32 fused, fraction of fp32 peak",
            thr[fp32]["pct_peak"] / 100, 0.80)
    o8_fwd = next((n for n in thr if n.startswith("Optimum int8")), None)
    if fp32 in thr and int8 in thr:
        add(f"{shape} throughput: bertonnx int8 / bertonnx fp32",
            thr[int8]["seq_per_s"] / thr[fp32]["seq_per_s"], 1.6)
    if o8_fwd and int8 in thr:
        add(f"{shape} throughput: bertonnx int8 / Optimum int8",
            thr[int8]["seq_per_s"] / thr[o8_fwd]["seq_per_s"], 1.3)
    if o8_fwd and int8 in lat and "128" in lat[int8]:
        add("b=1 s=128 latency: bertonnx int8 / Optimum int8",
            lat[int8]["128"]["median"] / lat[o8_fwd]["128"]["median"], 0.75, False)
    opt_cold = next((n for n in cold if n.startswith("Optimum")), None)
    for cli in (n for n in cold if n.startswith("bertonnx CLI")):
        add(f"cold start: {cli} wall seconds", cold[cli]["wall_s"]["median"], 1.0, False)
        if opt_cold:
            add(f"cold start: {cli} peak RSS / {opt_cold}'s",
                cold[cli]["peak_rss_mib"] / cold[opt_cold]["peak_rss_mib"], 1 / 3, False)
    return out


def format_targets(t: dict) -> str:
    lines = ["", "targets (ratios measured side by side in this run)"]
    for name, row in t.items():
        lines.append(f"  {name:<66} {row['value']:7.2f}  {row['rule']:<7.6} "
                     f"{'met' if row['met'] else 'MISSED'}")
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default",
                    help="text-classification checkpoint folder (default: MiniLM + seeded head)")
    ap.add_argument("--work", type=Path, default=Path(".bench"),
                    help="folder for checkpoints and exports (reused between runs)")
    ap.add_argument("--fresh", action="store_true", help="re-export everything")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run in seconds")
    ap.add_argument("--texts", type=int, help="end-to-end inputs (default 512)")
    ap.add_argument("--repeats", type=int, help="timed rounds (default 5)")
    ap.add_argument("--threads", type=int, help="intra-op threads (default: usable CPUs)")
    ap.add_argument("--int8", default="default",
                    help="int8 settings of our export: 'default' (the export's measured choice) "
                         "or a comma list of per_channel, QInt8, reduce_range")
    ap.add_argument("--no-optimum", action="store_true", help="leave Optimum out")
    ap.add_argument("--no-cold-start", action="store_true")
    ap.add_argument("--json", type=Path, help="write the report here as JSON")
    args = ap.parse_args(argv)

    kw = dict(B.QUICK) if args.quick else {}
    kw.update({k: v for k, v in dict(texts=args.texts, repeats=args.repeats,
                                     threads=args.threads).items() if v is not None})
    kw["cold_start"] = not args.no_cold_start
    options = B.BenchOptions(**kw)
    threads = options.n_threads
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    t_setup = time.perf_counter()
    ckpt = checkpoint(args.model, work)
    fp32_dir = ours(ckpt, work, "none", args.fresh)
    int8_dir = ours(ckpt, work, "int8", args.fresh, args.int8)
    use_optimum = not args.no_optimum and _has("optimum.onnxruntime")
    opt = optimum_artifacts(ckpt, work, args.fresh) if use_optimum else None
    say(f"artifacts ready in {time.perf_counter() - t_setup:.0f} s")

    config = json.loads((fp32_dir / "config.json").read_text())
    inputs = B.text_set(options.texts)
    report = B.Report(B.machine_info(threads), asdict(options))
    report.text_set = B.describe_texts(inputs, load_tokenizer(fp32_dir))
    int8_info = Manifest.read(int8_dir, verify=False).quantization
    names = {"fp32": "bertonnx fp32 fused", "int8": "bertonnx int8 fused"}
    report.machine["bertonnx_int8"] = {k: int8_info.get(k) for k in
                                       ("per_channel", "weight_type", "reduce_range")}
    engines = [B.onnx_engine(names["fp32"], fp32_dir, threads, quantized=False),
               B.onnx_engine(names["int8"], int8_dir, threads, quantized=True)]
    scratch = B.torch_engine(ckpt, TASK, threads, fp32_dir)  # picks torch's thread count
    report.machine["torch_threads"] = scratch.note
    if opt:
        engines.append(optimum_engine("Optimum O2 (fp32) pipeline", *opt["fp32"], inputs,
                                      threads, options.pipeline_batch_sizes, False))
        engines.append(optimum_engine("Optimum int8 pipeline", *opt["int8"], inputs, threads,
                                      options.pipeline_batch_sizes, True))
    engines.append(scratch)
    engines.append(B.transformers_engine(ckpt, TASK, inputs, threads,
                                         options.pipeline_batch_sizes))
    with B.quiet_logs():
        B.run_bench(engines, task=TASK, config=config, inputs=inputs, options=options,
                    report=report, say=say, baseline=engines[-1].name)

    if options.cold_start:
        text = inputs[0][:200]
        say("cold start")
        report.cold_start["bertonnx CLI (fp32)"] = B.cold_start(
            B.cli_argv(fp32_dir, TASK, text), options.cold_repeats)
        report.cold_start["bertonnx CLI (int8)"] = B.cold_start(
            B.cli_argv(int8_dir, TASK, text), options.cold_repeats)
        if opt:
            report.cold_start["Optimum pipeline script (int8)"] = B.cold_start(
                optimum_script_argv(*opt["int8"], text), options.cold_repeats)
        report.cold_start["transformers pipeline script"] = B.cold_start(
            B.transformers_script_argv(ckpt, TASK, text), options.cold_repeats)

    report.sizes["checkpoint (safetensors)"] = B.folder_size(ckpt)
    report.sizes[names["fp32"]] = B.folder_size(fp32_dir)
    report.sizes[names["int8"]] = B.folder_size(int8_dir)
    if opt:
        report.sizes["Optimum O2 (fp32)"] = B.folder_size(opt["fp32"][0])
        report.sizes["Optimum int8"] = B.folder_size(opt["int8"][0])
    goals = targets(report, names)
    report.ratios = {k: v["value"] for k, v in goals.items()}
    report.machine["notes"] = opt["notes"] if opt else []
    report.machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]

    base = engines[-1].name
    text = B.format_report(report, base)
    text = text.split("\nratios")[0] + format_targets(goals)
    for note in report.machine["notes"]:
        text += f"\n  note: {note}"
    print(text)
    if args.json:
        payload = {**asdict(report), "targets": goals}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main())
