"""BertConfig <-> transformers.BertConfig, presets, derived fields."""
from __future__ import annotations

import pytest
import transformers

from bertonnx.build import PRESETS, TASKS, BertConfig, build_model, preset


def test_from_hf_reads_every_shape_field():
    hf = transformers.BertConfig(vocab_size=77, hidden_size=20, num_hidden_layers=3,
                                 num_attention_heads=5, intermediate_size=31, hidden_act="relu",
                                 max_position_embeddings=40, type_vocab_size=3,
                                 layer_norm_eps=1e-6, pad_token_id=1, classifier_dropout=0.3,
                                 problem_type="regression", num_labels=1)
    c = BertConfig.from_hf(hf.to_dict())
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "hidden_act", "max_position_embeddings", "type_vocab_size",
                 "layer_norm_eps", "pad_token_id", "classifier_dropout", "problem_type"):
        assert getattr(c, name) == getattr(hf, name), name
    assert c.head_dim == 4 and c.num_labels == 1


def test_to_hf_is_read_back_by_transformers(tmp_path):
    c = BertConfig(vocab_size=50, hidden_size=24, num_attention_heads=3,
                   problem_type="multi_label_classification").with_labels(["x", "y", "z"])
    hf = transformers.BertConfig.from_dict(c.to_hf())
    assert hf.num_labels == 3 and hf.id2label == {0: "x", 1: "y", 2: "z"}
    assert hf.label2id == {"x": 0, "y": 1, "z": 2}
    assert hf.problem_type == "multi_label_classification"
    assert BertConfig.from_hf(hf.to_dict()) == c


def test_num_labels_without_id2label():
    c = BertConfig.from_hf({"num_labels": 4, "hidden_size": 8, "num_attention_heads": 2})
    assert c.id2label == {i: f"LABEL_{i}" for i in range(4)}


@pytest.mark.parametrize("name", PRESETS)
def test_presets_are_consistent(name):
    c = preset(name)
    assert c.head_dim * c.num_attention_heads == c.hidden_size
    assert transformers.BertConfig(**{k: v for k, v in c.to_hf().items()
                                      if k not in ("id2label", "label2id")}).hidden_size \
        == c.hidden_size


def test_tiny_preset_builds_every_task():
    for task in TASKS:
        model = build_model(preset("tiny"), task)
        assert sum(p.numel() for p in model.parameters()) < 200_000, task
