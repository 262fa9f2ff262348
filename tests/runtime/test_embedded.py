"""The embedded fill-mask default: shipped intact, loadable by the word "default", sensible."""
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.errors import ConfigError
from bertonnx.runtime.manifest import Manifest
from bertonnx.runtime.pipelines import EMBEDDED


def test_embedded_export_is_verified_int8_and_fused():
    m = Manifest.read(EMBEDDED["fill-mask"])  # sha256 of every file checked
    assert m.task == "fill-mask" and m.quantization["mode"] == "int8"
    assert m.fused_ops["QAttention"] == 3 and m.fused_ops["QEmbedLayerNormalization"] == 1
    assert m.parity["passed"] and m.parity["agreement"] >= 0.9


def test_default_answers_like_a_language_model():
    fill = load("default")
    # The corpus is about self-driving cars: a model that learnt anything puts "cars"/"car" high.
    tokens = [r["token_str"] for r in fill("self-driving [MASK] are the future", top_k=5)]
    assert {"cars", "car"} & set(tokens), tokens


def test_default_has_no_other_task():
    with pytest.raises(ConfigError, match="no embedded default"):
        load("default", task="question-answering")
