"""The word `default`: one table (bertonnx.runtime.core.defaults) behind every command and `load()`,
and the shipped fill-mask default — verified, fp32, fused, and answering English cloze
sentences it never saw (scripts/data/cloze_en.tsv; the corpus script drops any line holding one).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.runtime import load, load_tokenizer
from bertonnx.runtime.core import cpu, defaults
from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.manifest import Manifest

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_export_is_verified_fp32_and_fused():
    m = Manifest.read(defaults.export_dir("fill-mask"))  # sha256 of every file checked
    assert m.task == "fill-mask" and m.quantization["mode"] == "none"
    layers = m.config["num_hidden_layers"]
    assert m.fused_ops["Attention"] == layers and m.fused_ops["EmbedLayerNormalization"] == 1
    assert m.parity["passed"] and m.parity["max_abs"]["logits"] <= 1e-4


def test_the_shipped_graph_suits_every_cpu_kind():
    """No integer kernel in it: an int8 graph is tuned for the CPU it was made on (an s8 graph
    made on AMX can saturate on AVX2's u8×s8 multiply-adds), and the user has no checkpoint to
    rebuild it from (issue 31, item 5). fp32 answers alike on every kind."""
    import onnx  # only to read the graph's op types

    graph = onnx.load(defaults.export_dir("fill-mask") / "model.onnx", load_external_data=False)
    ops = {n.op_type for n in graph.graph.node}
    assert not {op for op in ops if "Integer" in op or "Quantize" in op or op.startswith("Q")}, ops
    assert not cpu.warn_if_other_cpu(defaults.export_dir(), Manifest.read(
        defaults.export_dir()).quantization, kind="avx2", source="default")


def test_fill_mask_default_answers_english_cloze_sentences():
    """The shipped export measured 10/55 top-1 and 27/55 top-5 on the cloze set
    (docs/default-model.md); the goal it was trained for — top-5 for half, top-1 for a third —
    is not reached yet. This guards what it does reach, with a margin of two sentences for
    near ties that fp32 kernels of other CPUs may order otherwise. The previous default (a
    tweet model) scored 0/55."""
    # scored by the script that made docs/default-model.md's figures, so there is one scorer
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "english_corpus.py"), "cloze",
                          "default", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout)
    top1, top5 = r["top1"], r["top5"]
    assert r["sentences"] >= 40
    assert top5 >= 25 and top1 >= 8, (top1, top5, r["sentences"])
    fill = load("default")
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
