"""The int8 recipes side by side on this CPU: accuracy on real tweets, model-only speed and end
to end texts/s, beside our fp32 and Optimum's int8 with the configuration it documents for
this CPU. export/int8/recipes.py's TARGETS rows are ordered from this study's output; its
figures are kept in export/int8/evidence.toml.

    python -m bertonnx.bench.int8_recipes --work .bench/int8 [--rounds 7] [--texts 256]

Model: all-MiniLM-L6-v2 with a 3-label sentiment head fitted (logistic regression on the pooled
[CLS], bench/int8_study.py's) on 600 real tweets, judged on 600 held-out ones: argmax agreement
with the fp32 torch model and accuracy against the tweets' labels (gate: agreement ≥ the
contract's INT8_MIN_AGREEMENT and accuracy no more than 1 point below fp32 torch's). Every
graph is timed in one process, round-robin (engines interleaved, medians): model only at
b32 s128 on the same random feed, end to end on the same mixed texts (bench/inputs.text_set).

Rows: each recipe of export/int8/recipes.py exported by `export_model`; "unfused s8" (dynamic
int8 of the unfused graph: plain MatMulInteger, no QAttention); our fp16 graph on CPU; Optimum
O2 fp32 and Optimum int8 (ORTQuantizer, AutoQuantizationConfig for this CPU, per_channel=False).
bf16 is not a row: onnxruntime's CPU provider has no bf16 MatMul/Gemm/Add kernels (checked).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from bertonnx.build import default_model_dir, load_checkpoint, load_pretrained, load_tokenizer
from bertonnx.export import ExportOptions, agreement, export_model
from bertonnx.export.int8 import quantize
from bertonnx.export.int8.recipes import RECIPES
from bertonnx.export.parity import run_ort, run_torch
from bertonnx.runtime.core.contract import INT8_MIN_AGREEMENT
from bertonnx.runtime.core.cpu import this_kind
from bertonnx.runtime.core.session import create_session

from .engines import Engine, onnx_engine
from .inputs import text_set
from .int8_study import fit_head, tweets
from .machine import machine_info
from .optimum import OPTIMUM_CONFIG, optimum_artifacts, optimum_engine
from .report import format_report, peak_lines
from .runner import BenchOptions, Workload, run

TASK = "text-classification"
LABELS = ("negative", "neutral", "positive")


def say(msg: str) -> None:
    print(f"int8_recipes: {msg}", file=sys.stderr, flush=True)


def checkpoint(work: Path, train: list) -> Path:
    """MiniLM + a sentiment head fitted on `train`, saved once (every engine loads it)."""
    out = work / "minilm-sentiment"
    if (out / "model.safetensors").is_file():
        return out
    src = default_model_dir()
    clf = load_checkpoint(src, TASK, id2label=dict(enumerate(LABELS)))
    fit_head(clf.model, load_tokenizer(src), train)
    clf.save_pretrained(out)
    return out


def exports(ckpt: Path, work: Path, recipes: list[str]) -> dict[str, Path]:
    """Our fp32, fp16 and one int8 export per recipe (reused when present)."""
    wanted = {"bertonnx fp32": ExportOptions(force=True),
              "bertonnx fp16 (CPU)": ExportOptions(quantize="fp16", force=True, parity=False)}
    wanted.update({f"bertonnx int8 {r}": ExportOptions(quantize="int8", int8_recipe=r,
                                                        force=True, parity=False)
                   for r in recipes})
    out = {}
    for name, opts in wanted.items():
        folder = work / name.replace(" ", "-").replace("(", "").replace(")", "")
        if not (folder / "bertonnx.json").is_file():
            say(f"export {name}")
            export_model(ckpt, TASK, folder, opts)
        out[name] = folder
    return out


def unfused_int8(ckpt: Path, work: Path) -> Path:
    """Dynamic s8 per-channel int8 of the unfused graph: plain MatMulInteger everywhere."""
    path = work / "unfused-s8.onnx"
    if not path.is_file():
        folder = work / "bertonnx-fp32-unfused"
        export_model(ckpt, TASK, folder, ExportOptions(optimize=False, force=True, parity=False))
        q, _ = quantize.int8(onnx.load(str(folder / "model.onnx")), RECIPES["s8"].settings, work)
        onnx.save_model(q, str(path))
    return path


def accuracy(graphs: dict[str, Path], ckpt: Path, data: list) -> dict:
    """Argmax agreement with the fp32 torch model and accuracy, per graph, on `data`."""
    tok = load_tokenizer(ckpt)
    model = load_pretrained(ckpt, TASK)
    labels = np.array([lab for _, lab in data])
    batches = [agreement.encode(tok, [t for t, _ in data[i:i + 32]], max_len=128)[:3]
               for i in range(0, len(data), 32)]
    ref = np.concatenate([run_torch(model, *b)[0] for b in batches]).argmax(-1)
    out = {"fp32 torch": {"agreement": 1.0, "accuracy": float(np.mean(ref == labels))}}
    for name, path in graphs.items():
        sess = create_session(path).inner
        got = np.concatenate([run_ort(sess, *b)[0] for b in batches]).argmax(-1)
        out[name] = {"agreement": float(np.mean(got == ref)),
                     "accuracy": float(np.mean(got == labels))}
    return out


def study(work: Path, rounds: int, texts: int, train_n: int = 600, eval_n: int = 600) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    data = tweets(train_n + eval_n)
    ckpt = checkpoint(work, data[:train_n])
    ours = exports(ckpt, work, list(RECIPES))
    kind = this_kind()
    config = OPTIMUM_CONFIG[kind]
    opt = optimum_artifacts(ckpt, work, False, say, int8_config=config)
    optimum_int8 = f"Optimum int8 ({config} config)"
    graphs = {name: folder / "model.onnx" for name, folder in ours.items()}
    graphs["unfused s8 (MatMulInteger only)"] = unfused_int8(ckpt, work)
    graphs["Optimum O2 (fp32)"] = opt["fp32"][0] / opt["fp32"][1]
    graphs[optimum_int8] = opt["int8"][0] / opt["int8"][1]

    say("accuracy on held-out tweets")
    acc = accuracy(graphs, ckpt, data[train_n:])
    floor = acc["fp32 torch"]["accuracy"] - 0.01
    for name, row in acc.items():
        row["passes"] = bool(row["agreement"] >= INT8_MIN_AGREEMENT and row["accuracy"] >= floor)

    threads = 2
    inputs = text_set(texts)
    # fp16 and the unfused graph: model only (fp16 on CPU casts around most ops: minutes a
    # round end to end)
    engines = [onnx_engine(name, folder, threads) for name, folder in ours.items()
               if "fp16" not in name]
    engines += [model_only_engine(name, graphs[name], threads, precision)
                for name, precision in (("bertonnx fp16 (CPU)", "fp16"),
                                        ("unfused s8 (MatMulInteger only)", "int8"))]
    engines += [optimum_engine("Optimum O2 (fp32) pipeline", *opt["fp32"], inputs, threads,
                               (1, 8, 32)),
                optimum_engine(f"{optimum_int8} pipeline", *opt["int8"], inputs, threads,
                               (1, 8, 32), precision="int8")]
    config_json = json.loads((ours["bertonnx fp32"] / "config.json").read_text())
    options = BenchOptions(texts=texts, repeats=rounds, warmup=1, latency_seqs=(),
                           batch=32, batch_seq=128, cold_start=False, threads=threads)
    say(f"timing {len(engines)} engines round-robin, {rounds} rounds")
    result = run(engines, options, Workload(TASK, config_json, inputs, ours["bertonnx fp32"]),
                 say)
    return {"machine": machine_info(threads), "cpu_kind": kind, "optimum_config": config,
            "accuracy": acc, "bench": json.loads(result.to_json()),
            "report": format_report(result)}


def model_only_engine(name: str, path: Path, threads: int, precision: str) -> Engine:
    session = create_session(path, threads=threads)
    return Engine(name, forward=lambda feeds: session.run(feeds), precision=precision)


def format_study(r: dict) -> str:
    thr, e2e = r["bench"]["throughput"], r["bench"]["end_to_end"]
    fp32 = thr["bertonnx fp32"]["ms"]
    lines = [f"CPU kind {r['cpu_kind']} · Optimum config {r['optimum_config']}",
             *peak_lines(r["machine"]),
             f"{'graph':<44} {'agree':>6} {'acc':>6} {'gate':>5} {'b32s128 ms':>11} "
             f"{'×fp32':>6} {'texts/s':>8}"]
    for name, a in r["accuracy"].items():
        if name == "fp32 torch":
            lines.append(f"{name:<44} {a['agreement']:6.3f} {a['accuracy']:6.3f}")
            continue
        t = thr.get(name) or thr.get(name.removesuffix(" pipeline"))
        e = e2e.get(name) or e2e.get(f"{name} pipeline") or next(
            (v for k, v in e2e.items() if k.startswith(name)), None)
        ms = f"{t['ms']:11.1f} {fp32 / t['ms']:6.2f}" if t else f"{'':11} {'':6}"
        ips = f"{e['items_per_s']:8.1f}" if e else ""
        lines.append(f"{name:<44} {a['agreement']:6.3f} {a['accuracy']:6.3f} "
                     f"{'pass' if a['passes'] else 'FAIL':>5} {ms} {ips}")
    return "\n".join(lines)


def main(argv=None) -> int:
    # argparse, not click: a study run as `python -m`, not a bertonnx command
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.int8_recipes")
    ap.add_argument("--work", type=Path, default=Path(".bench/int8"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--texts", type=int, default=256)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    r = study(a.work, a.rounds, a.texts)
    print(r["report"])
    print()
    print(format_study(r))
    say(f"done in {time.perf_counter() - t0:.0f} s")
    if a.json:
        a.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
