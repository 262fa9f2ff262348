"""DeBERTa-v2/v3 on the one encoder, beyond what the family-looping tests cover
(tests/build/test_family.py runs every task on the v3-shaped tiny model, conftest's
FAMILY_CONFIGS): the config switches transformers 4.57 reads, each against its own classes.

- the attention variants: separate position projections (share_att_key false), one term only
  (c2p or p2c), no relative attention, plain distances (no log buckets);
- v2's inputs: absolute positions, token types and an embedding projection;
- the MLM head under both names (`legacy`), and a folder whose config and weights disagree
  on it, which transformers loads with a drawn head (and so does bertonnx, saying so);
- sequences past the position table (relative positions have no length limit);
- the bucket index table against transformers' own build_relative_position at v3's size;
- the options bertonnx does not implement, each refused in one line.
"""
from __future__ import annotations

import pytest
import torch
import transformers
from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

from bertonnx.build import BertConfig, load_checkpoint
from bertonnx.build.deberta import index_table
from bertonnx.runtime.core.errors import ConfigError

from ._compare import assert_close
from .test_family import batch_for, check_family, reload_with_auto

DEBERTA = "deberta-v2"


@pytest.mark.parametrize("task,config", [
    ("fill-mask", dict(share_att_key=False)),
    ("feature-extraction", dict(share_att_key=False, pos_att_type=["c2p"])),
    ("token-classification", dict(pos_att_type="p2c")),
    ("feature-extraction", dict(relative_attention=False)),
    ("question-answering", dict(position_buckets=-1, max_relative_positions=12,
                                norm_rel_ebd="none")),
    # DeBERTa-v2's inputs: absolute positions, two token types, a narrower embedding
    ("text-classification", dict(position_biased_input=True, type_vocab_size=2,
                                 embedding_size=16, pooler_hidden_act="tanh")),
    # the lm_predictions head (transformers runs it only untied)
    ("fill-mask", dict(legacy=False, tie_word_embeddings=False)),
])
def test_config_variants_match_transformers_and_save_back(tiny_hf_checkpoint, tmp_path, task,
                                                          config):
    folder = tiny_hf_checkpoint(task, model_type=DEBERTA, **config)
    ours, ref, out = check_family(folder, task, tmp_path)
    c = ours.config
    assert (c.relative_attention, c.share_att_key) == (ref.config.relative_attention,
                                                       ref.config.share_att_key)
    names = set(ours.state_dict())
    assert any(".pos_k." in n for n in names) == (
        c.relative_attention and not c.share_att_key and "c2p" in c.pos_att_type)
    assert ("encoder.embeddings.project.weight" in names) == ("embedding_size" in config)


def test_legacy_config_with_new_head_names_draws_the_head_as_transformers_does(
        tiny_hf_checkpoint, tmp_path):
    # DeBERTa-v3's own checkpoints name their head lm_predictions.* but leave `legacy` out of
    # config.json, i.e. true: transformers reads cls.predictions.* and draws them.
    folder = tiny_hf_checkpoint("fill-mask", model_type=DEBERTA, legacy=False,
                                tie_word_embeddings=False)
    cfg = (folder / "config.json").read_text().replace('"legacy": false', '"legacy": true')
    (folder / "config.json").write_text(cfg)
    _, info = transformers.AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    loaded = load_checkpoint(folder, "fill-mask", warn=False)
    # transformers also lists the decoder, whose weight is the word embeddings' and whose bias
    # is cls.predictions.bias
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert set(loaded.untrained_head()["initialised"]) == set(info["missing_keys"]) - tied
    assert all(k.startswith("cls.predictions.") for k in info["missing_keys"])


def test_sequences_past_the_position_table(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("feature-extraction", model_type=DEBERTA)
    ours = load_checkpoint(folder, "feature-extraction").model
    ref = reload_with_auto(folder, "feature-extraction")
    ids, mask, _ = batch_for(ours.config, T=150, lengths=(150, 97, 3))
    assert ids.shape[1] > ours.config.max_position_embeddings
    with torch.no_grad():
        got = ours(ids, attention_mask=mask)
        want = ref(input_ids=ids, attention_mask=mask)
    assert_close("feature-extraction", got, want, mask)


@pytest.mark.parametrize("buckets,max_relative", [(256, -1), (-1, -1), (16, 40)])
def test_index_table_is_transformers_relative_positions(buckets, max_relative):
    c = BertConfig(model_type=DEBERTA, hidden_size=32, num_attention_heads=4,
                   relative_attention=True, position_buckets=buckets,
                   max_relative_positions=max_relative)
    table, reach = index_table(c)
    span = buckets if buckets > 0 else c.max_position_embeddings
    T = 1100  # past v3's 512 positions, where the buckets reach the table's edge
    x = torch.zeros(1, T, 1)
    rel = build_relative_position(x, x, bucket_size=buckets,
                                  max_position=max_relative if max_relative > 0 else 512)[0]
    want = torch.clamp(rel + span, 0, 2 * span - 1)  # transformers' c2p index
    pos = torch.arange(T)
    got = table[(pos[:, None] - pos[None, :]).clamp(-reach, reach) + reach]
    assert torch.equal(got, want)
    assert reach < T and len(table) == 2 * reach + 1


@pytest.mark.parametrize("change,message", [
    (dict(conv_kernel_size=3), "conv_kernel_size 3 .* is not supported"),
    (dict(attention_head_size=16), "attention_head_size 16 differs from 8"),
    (dict(pooler_hidden_size=64), "pooler_hidden_size 64 differs from 32"),
    (dict(pooler_hidden_act="softmax"), "unsupported pooler_hidden_act 'softmax'"),
])
def test_unimplemented_options_are_refused_in_one_line(change, message):
    hf = {"model_type": DEBERTA, "hidden_size": 32, "num_attention_heads": 4, **change}
    with pytest.raises(ConfigError, match=message) as err:
        BertConfig.from_hf(hf)
    assert "\n" not in str(err.value)


def test_deberta_fields_are_its_own():
    with pytest.raises(ConfigError, match="position_buckets=256 does not fit model_type 'bert'"):
        BertConfig(position_buckets=256)
    hf = BertConfig(model_type=DEBERTA, hidden_size=32, num_attention_heads=4).to_hf()
    assert "position_buckets" in hf and "position_buckets" not in BertConfig().to_hf()
    assert "embedding_size" not in hf  # transformers would read a null as the width
    # transformers' defaults for what a DeBERTa config.json leaves out
    c = BertConfig.from_hf({"model_type": DEBERTA, "pos_att_type": "p2c|c2p"})
    assert (c.type_vocab_size, c.layer_norm_eps, c.legacy) == (0, 1e-7, True)
    assert (c.pos_att_type, c.pooler_hidden_act) == (("p2c", "c2p"), "gelu")
