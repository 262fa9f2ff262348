"""The loop's optimizer: which learning rate and weight decay each parameter gets."""
from __future__ import annotations

import pytest

from bertonnx.build import BertConfig, build_model
from bertonnx.build.train import TrainConfig
from bertonnx.build.train.loop import make_optimizer
from bertonnx.runtime.core.errors import InputError


def _model():
    c = BertConfig(vocab_size=50, hidden_size=16, num_attention_heads=2, num_hidden_layers=3,
                   intermediate_size=32).with_labels(["a", "b"])
    return build_model(c, "text-classification")


def _lr_and_decay(model, **kw) -> dict[str, tuple[float, float]]:
    opt = make_optimizer(model, TrainConfig(out="x", lr=1e-4, weight_decay=0.01, **kw))
    of = {id(p): (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
    assert sum(len(g["params"]) for g in opt.param_groups) == len(of)  # each param once
    return {name: of[id(p)] for name, p in model.named_parameters()}


def test_by_default_every_parameter_gets_the_one_lr_and_biases_and_norms_no_decay():
    model = _model()
    got = _lr_and_decay(model)
    assert {lr for lr, _ in got.values()} == {1e-4}
    for name, p in model.named_parameters():
        assert got[name][1] == (0.01 if p.ndim >= 2 else 0.0), name


def test_layer_decay_lowers_each_layer_below_the_top_and_the_head_has_its_own_scale():
    model = _model()
    got = _lr_and_decay(model, layer_decay=0.5, head_lr_scale=10)
    want = {"encoder.embeddings.word.weight": 1e-4 * 0.5 ** 4,
            "encoder.layers.0.attn.q.weight": 1e-4 * 0.5 ** 3,
            "encoder.layers.1.ffn.up.bias": 1e-4 * 0.5 ** 2,
            "encoder.layers.2.ffn_norm.weight": 1e-4 * 0.5,
            "encoder.pooler.dense.weight": 1e-4,
            "head.classifier.weight": 1e-3, "head.classifier.bias": 1e-3}
    assert {name: got[name][0] for name in want} == pytest.approx(want)
    assert got["encoder.layers.1.ffn.up.bias"][1] == 0.0
    assert got["head.classifier.weight"][1] == 0.01
    # every parameter is one of those kinds: none was left at a lr by accident
    assert {round(lr / 1e-4, 6) for lr, _ in got.values()} == {0.0625, 0.125, 0.25, 0.5, 1, 10}


@pytest.mark.parametrize("kw,message", [
    ({"layer_decay": 0}, "--layer-decay must be in \\(0, 1\\]"),
    ({"layer_decay": 1.5}, "--layer-decay must be in \\(0, 1\\]"),
    ({"head_lr_scale": 0}, "--head-lr-scale must be positive"),
])
def test_lr_shares_out_of_range_are_refused(kw, message):
    with pytest.raises(InputError, match=message):
        TrainConfig(out="x", **kw)
