"""Reliability fixtures: one tiny export per task, built once per session, and CLI helpers.

`tiny_export(task)` -> export folder (fp32, fused, parity skipped: parity is the export tests'
business) of a random 2-layer BERT with the shared tiny vocab and 64 positions, so windowing
and truncation are reached by short texts. `tiny_checkpoint(task, seed)` -> its HF folder.
`pipes[task]` -> a loaded pipeline per task, shared by the session (tests must not mutate it).
`run_cli(*args)` -> CompletedProcess of `python -m bertonnx.runtime.cli ARGS` in a subprocess.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import VOCAB, perturb_, write_vocab

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
LABELS = {0: "negative", 1: "neutral", 2: "positive"}
TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction")
MAX_POSITIONS = 64
HIDDEN = 32


def _labels(task: str) -> dict:
    labels = {"text-classification": LABELS, "token-classification": BIO}.get(task)
    return {} if labels is None else {"id2label": labels,
                                      "label2id": {v: k for k, v in labels.items()}}


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    import torch
    import transformers

    from bertonnx.build import TASKS as BUILD_TASKS

    root = tmp_path_factory.mktemp("reliability-ckpt")
    made: dict[tuple, Path] = {}

    def get(task: str, seed: int = 0) -> Path:
        if (task, seed) not in made:
            cfg = transformers.BertConfig(
                vocab_size=len(VOCAB), hidden_size=HIDDEN, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=37,
                max_position_embeddings=MAX_POSITIONS, initializer_range=0.1, **_labels(task))
            torch.manual_seed(seed)
            model = getattr(transformers, BUILD_TASKS[task].hf_class)(cfg).eval()
            perturb_(model, seed)
            folder = root / f"{task}-{seed}"
            model.save_pretrained(folder)
            write_vocab(folder)
            made[(task, seed)] = folder
        return made[(task, seed)]

    return get


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, tiny_checkpoint):
    from bertonnx.export import ExportOptions, export_model

    root = tmp_path_factory.mktemp("reliability-onnx")
    made: dict[str, Path] = {}

    def get(task: str) -> Path:
        if task not in made:
            out = root / task
            export_model(tiny_checkpoint(task), task, out, ExportOptions(parity=False))
            made[task] = out
        return made[task]

    return get


@pytest.fixture(scope="session")
def pipes(tiny_export):
    from bertonnx.runtime import load

    class Lazy(dict):
        def __missing__(self, task):
            self[task] = load(tiny_export(task))
            return self[task]

    return Lazy()


def _cli_env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


@pytest.fixture(scope="session")
def run_cli():
    def run(*args, input: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", *map(str, args)],
                              input=input, capture_output=True, timeout=timeout, env=_cli_env())

    return run


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a failed command; fails the test on a traceback or more lines."""
    err = proc.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err}"
    assert lines[0].startswith("bertonnx: error: "), lines[0]
    return lines[0]
