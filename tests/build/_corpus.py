"""The small synthetic English corpus the test_train_* modules train on: `make_corpus` writes
it, `make_tokenizer` learns a WordPiece vocabulary from it (bertonnx's train_tokenizer)."""
from __future__ import annotations

import random
from pathlib import Path

from bertonnx.build.train import TokenizerConfig, train_tokenizer

_SUBJ = "the cat|the dog|a man|the old woman|my friend|the team".split("|")
_VERB = "sat on|looked at|walked to|played with|talked about|ran past".split("|")
_OBJ = "the mat|the house|a river|the city|the new film|the happy child".split("|")


def make_corpus(path: Path, lines: int = 400, seed: int = 0, docs: int = 20) -> Path:
    """Sentences from a small grammar, blank lines between `docs` documents: learnable fast."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        out.append(f"{rng.choice(_SUBJ)} {rng.choice(_VERB)} {rng.choice(_OBJ)}.")
        if (i + 1) % (lines // docs) == 0:
            out.append("")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def make_tokenizer(folder: Path, corpus: Path, vocab_size: int = 100) -> Path:
    return train_tokenizer(TokenizerConfig(corpus=(corpus,), out=folder, vocab_size=vocab_size,
                                           min_frequency=1))
