"""What an export costs: peak RSS and wall time of `bertonnx export` (with parity and without)
beside `optimum-cli export onnx` (plain and `--optimize O2`) on the same checkpoint, each in a
fresh process, round-robin, medians. `--stages` also profiles one `bertonnx export` in-process:
the peak RSS of each step it announces.

    python -m bertonnx.bench.export_memory --make base .bench/bert-base-mlm    # random, offline
    python -m bertonnx.bench.export_memory .bench/bert-base-mlm --rounds 3 --stages

The checkpoints are random BertForMaskedLM of bert-base's shape (hidden 768, 12 layers, vocab
30522: 438 MB) or bert-large's (1024, 24: 1.34 GB), built with transformers, with the bundled
MiniLM's uncased WordPiece vocabulary (same size). The goal the figures are read against
(issue 14): peak RSS ≤ 3 × the weights + 0.5 GB and ≤ optimum-cli's, time ≤ 1.5 × optimum-cli
with O2, parity included.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from bertonnx.build import default_model_dir
from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime.core.tokenizer import TOKENIZER_FILES

from .compare import has_optimum
from .footprint import _SPAWN
from .timing import stats

SHAPES = {"base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                       intermediate_size=3072),
          "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096)}
MIN_FREE_GB = {"base": 4, "large": 12}  # the machine is shared: refuse rather than swap


def make_checkpoint(shape: str, out: Path) -> Path:
    """A random fill-mask checkpoint of `shape` (LayerNorms moved off 1/0) with a tokenizer."""
    import transformers  # the test extra's: only to make a random checkpoint

    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=30522,
                                                                 **SHAPES[shape])).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (default_model_dir() / name).is_file():
            shutil.copy2(default_model_dir() / name, out / name)
    return out


def available_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("inf")


def measured(argv: list[str]) -> dict:
    """Wall seconds and peak RSS (MiB) of `argv` in a fresh process (footprint's spawner)."""
    done = subprocess.run([sys.executable, "-c", _SPAWN, *argv], capture_output=True, text=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["rc"] != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... failed: {got['err'][-300:]}")
    return {"wall_s": got["wall"], "rss_mib": got["rss_kib"] / 1024}


def commands(ckpt: Path, task: str, work: Path, optimum: bool) -> dict[str, list[str]]:
    exe = Path(sys.executable).with_name("bertonnx")
    ours = [str(exe)] if exe.is_file() else [sys.executable, "-m", "bertonnx.runtime.cli"]
    # timing only: a checkpoint without the task's head (MiniLM for fill-mask) exports as well
    base = ours + ["export", str(ckpt), "--task", task, "--force", "--allow-untrained-head"]
    cmds = {"bertonnx export (parity)": base + ["--out", str(work / "ours")],
            "bertonnx export --no-parity": base + ["--out", str(work / "ours-np"), "--no-parity"]}
    if optimum and has_optimum("optimum.commands.optimum_cli"):
        cli = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "onnx", "-m",
               str(ckpt), "--task", task]  # what the optimum-cli script runs
        cmds["optimum-cli export onnx"] = cli + [str(work / "optimum")]
        cmds["optimum-cli export onnx --optimize O2"] = cli + ["--optimize", "O2",
                                                               str(work / "optimum-o2")]
    return cmds


def compare(ckpt: Path, task: str, rounds: int, optimum: bool = True) -> dict:
    """Every command `rounds` times, round-robin, each in a fresh process."""
    weights = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    with tempfile.TemporaryDirectory(prefix="bertonnx-export-memory-") as d:
        cmds = commands(ckpt, task, Path(d), optimum)
        runs: dict[str, list[dict]] = {name: [] for name in cmds}
        for _ in range(rounds):
            for name, argv in cmds.items():
                for out in Path(d).iterdir():  # optimum-cli refuses nothing, but start clean
                    shutil.rmtree(out, ignore_errors=True)
                runs[name].append(measured(argv))
    rows = {name: {"wall_s": stats([r["wall_s"] for r in rs]),
                   "rss_mib": stats([r["rss_mib"] for r in rs])} for name, rs in runs.items()}
    return {"checkpoint": str(ckpt), "weights_mib": weights / 2**20, "rounds": rounds,
            "bound_mib": 3 * weights / 2**20 + 512, "rows": rows}


def stages(ckpt: Path, task: str, argv_extra: tuple[str, ...] = ()) -> list[dict]:
    """Peak RSS of each step `bertonnx export` announces, sampled every 10 ms, in a child."""
    code = ("import sys, json\nfrom bertonnx.bench.export_memory import _stages_child\n"
            "print(json.dumps(_stages_child(sys.argv[1], sys.argv[2], sys.argv[3:])))")
    done = subprocess.run([sys.executable, "-c", code, str(ckpt), task, *argv_extra],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-500:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _stages_child(ckpt: str, task: str, extra: list[str]) -> list[dict]:
    steps: list[dict] = []
    stop = threading.Event()

    def say(msg):
        steps.append({"step": msg, "start_s": time.perf_counter() - t0, "peak_mib": _rss_mib()})

    def sample():
        while not stop.wait(0.01):
            if steps:
                steps[-1]["peak_mib"] = max(steps[-1]["peak_mib"], _rss_mib())

    t0 = time.perf_counter()
    threading.Thread(target=sample, daemon=True).start()
    with tempfile.TemporaryDirectory() as d:
        export_model(ckpt, task, Path(d) / "out", ExportOptions(
            parity="--no-parity" not in extra, quantize="int8" if "--int8" in extra else "none",
            allow_untrained_head=True),
            progress=say)
        say("done")
    stop.set()
    for a, b in zip(steps, steps[1:]):
        a["seconds"] = b["start_s"] - a["start_s"]
    return steps[:-1]


def format_compare(r: dict) -> str:
    w = r["weights_mib"]
    lines = [f"{r['checkpoint']}: weights {w:.0f} MiB; bound 3 × weights + 512 MiB = "
             f"{r['bound_mib']:.0f} MiB; median of {r['rounds']} fresh processes each",
             f"  {'command':<40} {'peak RSS MiB':>13} {'× weights':>10} {'wall s':>8}"]
    for name, row in r["rows"].items():
        rss, wall = row["rss_mib"]["median"], row["wall_s"]["median"]
        lines.append(f"  {name:<40} {rss:13.0f} {rss / w:10.2f} {wall:8.1f}")
    o2 = r["rows"].get("optimum-cli export onnx --optimize O2")
    ours = r["rows"]["bertonnx export (parity)"]
    if o2:
        lines.append(f"  bertonnx (parity) / optimum-cli O2: peak RSS "
                     f"{ours['rss_mib']['median'] / o2['rss_mib']['median']:.2f}×, wall "
                     f"{ours['wall_s']['median'] / o2['wall_s']['median']:.2f}× (goal ≤ 1.5×)")
    return "\n".join(lines)


def format_stages(steps: list[dict]) -> str:
    return "\n".join(["  step (bertonnx export, in-process)              peak RSS MiB  seconds"]
                     + [f"  {s['step'][:48]:<48} {s['peak_mib']:12.0f} {s['seconds']:8.1f}"
                        for s in steps])


def main(argv=None) -> int:
    # argparse, not click: a measurement run as `python -m`, not a bertonnx command
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.export_memory")
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--make", choices=sorted(SHAPES), help="build a random checkpoint of this "
                    "shape into CHECKPOINT first")
    ap.add_argument("--task", default="fill-mask")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-optimum", action="store_true")
    ap.add_argument("--stages", action="store_true", help="also profile one export's steps")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    shape = a.make or ("large" if "large" in a.checkpoint.name else "base")
    if available_gb() < MIN_FREE_GB[shape]:
        print(f"export_memory: only {available_gb():.1f} GB available, {shape} needs "
              f"{MIN_FREE_GB[shape]} GB free: not run", file=sys.stderr)
        return 1
    if a.make:
        make_checkpoint(a.make, a.checkpoint)
    report = {"compare": compare(a.checkpoint, a.task, a.rounds, not a.no_optimum)}
    print(format_compare(report["compare"]))
    if a.stages:
        report["stages"] = stages(a.checkpoint, a.task)
        print(format_stages(report["stages"]))
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
