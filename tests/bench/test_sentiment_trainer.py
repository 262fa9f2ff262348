"""bench/sentiment_trainer.py, the README's recipe against transformers' Trainer, on a tiny
random BERT: both trainers take the same number of optimizer steps on the same rows, and the
one scorer (transformers) reads bertonnx's fine-tuned folder to the accuracy bertonnx's own
evaluation reported."""
from __future__ import annotations

import csv
import json
import random

import pytest

pytest.importorskip("torch")
pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate")

from bertonnx.bench import sentiment_trainer  # noqa: E402  (after the skips: imports torch)
from bertonnx.build.train import FinetuneConfig, TrainConfig, finetune  # noqa: E402

WORDS = {"positive": "love happy good great", "negative": "sad never against off",
         "neutral": "the city river house"}


def _write(path, n: int, seed: int):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(n):
            label = sorted(WORDS)[i % 3]
            w.writerow([" ".join(rng.sample(WORDS[label].split(), 3)), label])
    return path


def test_trainer_gets_the_same_steps_and_one_scorer_judges_both(tmp_path, tiny_hf_checkpoint):
    base = tiny_hf_checkpoint("fill-mask")
    train, test = _write(tmp_path / "train.csv", 40, 0), _write(tmp_path / "test.csv", 12, 1)
    obvious = _write(tmp_path / "obvious.csv", 6, 2)
    ours = tmp_path / "ours"
    budget = sentiment_trainer.Budget(epochs=2, batch_size=16, max_seq_len=16)
    result = finetune(FinetuneConfig(
        model=str(base), task="text-classification", train_file=train, eval_file=test,
        max_seq_len=budget.max_seq_len,
        train=TrainConfig(out=ours, epochs=budget.epochs, batch_size=budget.batch_size,
                          lr=budget.lr, warmup=budget.warmup, progress=False)))

    report = sentiment_trainer.main([
        "--ours", str(ours), "--train", str(train), "--test", str(test), "--obvious",
        str(obvious), "--base", str(base), "--out", str(tmp_path / "cmp"), "--epochs", "2",
        "--batch-size", "16", "--max-seq-len", "16"])

    # 40 rows // 16 = 2 full batches an epoch (the partial one dropped, as bertonnx does), x 2
    assert report["steps"] == 4
    assert {name: r["steps"] for name, r in report["runs"].items()} == {
        "bertonnx finetune": 4, "Trainer (recipe)": 4, "Trainer (defaults)": 4}
    assert report["runs"]["bertonnx finetune"]["test"]["accuracy"] == result["accuracy"]
    labels = set(json.loads((tmp_path / "cmp" / "trainer-recipe" / "config.json").read_text())
                 ["id2label"].values())
    assert labels == set(WORDS)
    assert json.loads((tmp_path / "cmp" / "comparison.json").read_text()) == report

    # --skip-recipe: Trainer with its own defaults alone, beside the same scored folder
    alone = sentiment_trainer.main([
        "--ours", str(ours), "--train", str(train), "--test", str(test), "--obvious",
        str(obvious), "--base", str(base), "--out", str(tmp_path / "cmp2"), "--epochs", "2",
        "--batch-size", "16", "--max-seq-len", "16", "--skip-recipe"])
    assert list(alone["runs"]) == ["bertonnx finetune", "Trainer (defaults)"]
    assert alone["runs"]["Trainer (defaults)"] == report["runs"]["Trainer (defaults)"] | {
        "train_s": alone["runs"]["Trainer (defaults)"]["train_s"]}
