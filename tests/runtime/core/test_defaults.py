"""The word `default`: one table (bertonnx.runtime.core.defaults) behind every command and `load()`,
and the shipped fill-mask default — verified, int8, fused, and answering English cloze
sentences it never saw (scripts/data/cloze_en.tsv; the corpus script drops any line holding one).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.runtime import load, load_tokenizer
from bertonnx.runtime.core import defaults
from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.manifest import Manifest

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_export_is_verified_int8_and_fused():
    m = Manifest.read(defaults.export_dir("fill-mask"))  # sha256 of every file checked
    assert m.task == "fill-mask" and m.quantization["mode"] == "int8"
    layers = m.config["num_hidden_layers"]
    assert m.fused_ops["QAttention"] == layers and m.fused_ops["QEmbedLayerNormalization"] == 1
    assert m.parity["passed"] and m.parity["agreement"] >= 0.9


def test_fill_mask_default_answers_english_cloze_sentences():
    """The shipped int8 export measured 8/55 top-1 and 25/55 top-5 on the cloze set
    (docs/default-model.md); the goal it was trained for — top-5 for half, top-1 for a third —
    is not reached yet. This guards what it does reach, with a margin of three sentences for
    int8 kernels that differ between CPUs. The previous default (a tweet model) scored 0/55."""
    # scored by the script that made docs/default-model.md's figures, so there is one scorer
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "english_corpus.py"), "cloze",
                          "default", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    top1, top5 = r["top1"], r["top5"]
    assert r["sentences"] >= 40
    assert top5 >= 22 and top1 >= 5, (top1, top5, r["sentences"])
    fill = load("default")
    # alone, not in the batch: dynamic int8 quantizes each call's activations with that
    # call's own scale, so a text's scores move a little with its batch
    answers = [r["token_str"] for r in fill("Paris is the [MASK] of France.", top_k=3)]
    assert "capital" in answers, answers


def test_default_means_one_thing_per_kind():
    assert defaults.resolve_export("default") == defaults.export_dir("fill-mask")
    assert defaults.resolve_export("some/dir") == Path("some/dir")
    assert load("default").task == "fill-mask"
    assert load("default", task="fill-mask").folder.path == defaults.export_dir()
    # the default checkpoint has no QA head: the fix names a checkpoint trained for the task
    with pytest.raises(ConfigError, match=r"bertonnx export CHECKPOINT --task question-answering"
                                          r" --out DIR \(a checkpoint trained for question-"):
        load("default", task="question-answering")
    with pytest.raises(ConfigError, match="bertonnx export default --task feature-extraction"):
        load("default", task="feature-extraction")


def test_default_checkpoint_is_the_bundled_minilm():
    folder = defaults.checkpoint_dir()
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert defaults.resolve_checkpoint("default") == folder
    assert defaults.resolve_checkpoint("./x") == "./x"


def test_load_tokenizer_default_is_the_checkpoint_tokenizer():
    tok = load_tokenizer("default")
    assert tok.mask_token == "[MASK]" and tok.vocab_size == 30522
