"""ModernBERT on the one encoder, beyond what tests/build/test_family.py checks for every family.

Tiny random transformers checkpoints (tests/conftest.py: hidden 32, 4 heads, local_attention 8
so a layer attends within +-4 tokens) against transformers 4.57's own classes on its padded
attention paths (sdpa, and eager for the MLM; the unpadded flash path needs a GPU and
flash-attn): sequences longer than the window, every third layer global over four layers, mean
pooling, the biases ModernBERT's config can turn back on, the masks every layer reads, and the
first layer's missing attention norm. Compared at unpadded positions (HF_ATOL,
tests/build/_compare.py).
"""
from __future__ import annotations

import pytest
import torch
import transformers

from bertonnx.build import BertConfig, build_model, load_checkpoint
from bertonnx.runtime.core.errors import ConfigError

from ._compare import assert_close, padded_batch

HF_CLASS = {"fill-mask": "ModernBertForMaskedLM",
            "text-classification": "ModernBertForSequenceClassification",
            "token-classification": "ModernBertForTokenClassification",
            "question-answering": "ModernBertForQuestionAnswering",
            "feature-extraction": "ModernBertModel"}
# every bias ModernBERT's config can switch (off by default, the decoder's on)
BIASES = dict(attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True,
              decoder_bias=False)


def compare(folder, task: str, T: int = 29, attn: str = "sdpa"):
    """Ours and transformers' (with `attn`) on a right-padded batch: rows of T, T - 11 and 3."""
    ours = load_checkpoint(folder, task).model
    ref = getattr(transformers, HF_CLASS[task]).from_pretrained(
        folder, attn_implementation=attn).eval()
    ids, mask, _ = padded_batch(ours.config.vocab_size, T, lengths=(T, T - 11, 3),
                                pad_token_id=ours.config.pad_token_id)
    with torch.no_grad():
        got, want = ours(ids, mask), ref(input_ids=ids, attention_mask=mask)
    assert_close(task, got, want, mask)
    return ours, ref, (ids, mask)


@pytest.mark.parametrize("task", ["feature-extraction", "question-answering"])
def test_four_layers_past_the_window_match_transformers(tiny_hf_checkpoint, task):
    # layers 0 and 3 global, 1 and 2 local; 29 tokens reach far past the +-4 window (every
    # task's head on the 2-layer model: tests/build/test_family.py)
    folder = tiny_hf_checkpoint(task, model_type="modernbert", num_hidden_layers=4,
                                global_attn_every_n_layers=3)
    ours, _, _ = compare(folder, task)
    assert [layer.attn.local for layer in ours.encoder.layers] == [False, True, True, False]


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_pooling_with_every_bias_switched_on(tiny_hf_checkpoint, tmp_path, pooling):
    folder = tiny_hf_checkpoint("text-classification", model_type="modernbert",
                                classifier_pooling=pooling, **BIASES)
    ours, ref, (ids, mask) = compare(folder, "text-classification")
    assert ours.config.classifier_pooling == pooling
    back = ours.save_pretrained(tmp_path / "saved")
    again = transformers.AutoModelForSequenceClassification.from_pretrained(back).eval()
    assert again.config.classifier_pooling == pooling and again.config.mlp_bias
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids, attention_mask=mask).logits,
                           ref(input_ids=ids, attention_mask=mask).logits)


def test_mlm_with_biases_and_no_decoder_bias(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("fill-mask", model_type="modernbert", **BIASES)
    ours, _, _ = compare(folder, "fill-mask", attn="eager")
    assert ours.head.bias is None and ours.encoder.layers[1].attn.qkv.bias is not None


def test_masks_are_transformers_and_the_window_matters(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("feature-extraction", model_type="modernbert")
    ours, ref, (ids, mask) = compare(folder, "feature-extraction")
    # the additive masks every layer reads, against ModernBertModel._update_attention_mask
    m = mask[:, None, None, :].float()
    ctx = ours.encoder.rotary((1.0 - m) * torch.finfo(torch.float32).min)
    want_global, want_local = ref._update_attention_mask(mask, output_attentions=False)
    assert torch.equal(ctx.global_bias.expand_as(want_global), want_global)
    assert torch.equal(ctx.local_bias, want_local)
    T = ids.shape[1]
    far = torch.arange(T)[None, :].sub(torch.arange(T)[:, None]).abs() > 4  # +-local_attention/2
    assert torch.equal(ctx.local_bias[0, 0] < 0, far)  # row 0 is unpadded
    # the parity above is not vacuous: the same weights with a window covering every token
    # answer differently
    wide = build_model(ours.config.replace(local_attention=2 * T), "feature-extraction").eval()
    wide.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert not torch.allclose(wide(ids, mask)[0], ours(ids, mask)[0], atol=1e-3)
    assert [layer.attn.local for layer in ours.encoder.layers] == [False, True]
    assert isinstance(ours.encoder.layers[0].attn_norm, torch.nn.Identity)
    assert ours.encoder.final_norm is not None and ours.encoder.embeddings.position is None


def test_config_mistakes_are_one_line():
    with pytest.raises(ConfigError, match="unknown classifier_pooling 'max'"):
        BertConfig(model_type="modernbert", type_vocab_size=0, classifier_pooling="max")
    with pytest.raises(ConfigError, match="local_attention=64 does not fit model_type 'bert'"):
        BertConfig(local_attention=64)  # a field only ModernBERT has
    # bertonnx's own pretraining task (MLM + NSP) is BERT's alone
    with pytest.raises(ConfigError, match="task 'pretraining' is not implemented for modernbert"):
        build_model(BertConfig(model_type="modernbert", type_vocab_size=0, hidden_size=32,
                               num_attention_heads=2), "pretraining")
