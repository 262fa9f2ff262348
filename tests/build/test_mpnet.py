"""MPNet's own piece against transformers 4.57: the relative-position bias (build/mpnet.py).

tests/build/test_family.py runs MPNet through every task (load, parity, save, reload); here is
what only MPNet has: its buckets equal transformers' for every pair of positions a table
allows, the far (log-spaced and clamped) buckets and left padding match MPNetModel, positions
count past id 1 whatever pad_token_id says (as MPNetEmbeddings.padding_idx does), a table
with more rows than the 32 buckets read loads (fewer is one clear line), and the bias is
really there — a model without it misses transformers by far.
"""
from __future__ import annotations

import pytest
import torch
import transformers

from bertonnx.build import BertConfig, build_model, load_checkpoint
from bertonnx.build.mpnet import NUM_BUCKETS, relative_position_bucket
from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.families import usable_positions

from ._compare import assert_close
from .test_family import batch_for, check_family, reload_with_auto, run_both

EMB = "feature-extraction"


def test_buckets_equal_transformers_for_every_pair_of_positions():
    pos = torch.arange(514)  # all-mpnet-base-v2's table
    rel = pos[None, :] - pos[:, None]
    ref = transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(rel)
    got = relative_position_bucket(rel)
    assert torch.equal(got, ref)
    # every bucket is reached, the clamped last ones too, but 16: "after the query" at
    # distance 0, which is no distance after it
    assert set(got.unique().tolist()) == set(range(NUM_BUCKETS)) - {NUM_BUCKETS // 2}


def _model_and_reference(tiny_hf_checkpoint, **config):
    folder = tiny_hf_checkpoint(EMB, model_type="mpnet", **config)
    ours = load_checkpoint(folder, EMB)
    assert ours.head_initialised == []
    return folder, ours.model, reload_with_auto(folder, EMB)


def test_far_positions_use_the_log_and_clamped_buckets(tiny_hf_checkpoint):
    # 200 tokens: distances past max_distance 128 fall in the last bucket of each direction
    _, ours, ref = _model_and_reference(tiny_hf_checkpoint, max_position_embeddings=210)
    batch = batch_for(ours.config, T=200, lengths=(200, 150, 3))
    assert_close(EMB, *run_both(ours, ref, batch), batch[1])


def test_left_padding_matches_transformers(tiny_hf_checkpoint):
    # positions count non-pads from pad+1 wherever the padding is; the relative bias depends
    # only on the columns, so it is the same as transformers' there too
    _, ours, ref = _model_and_reference(tiny_hf_checkpoint)
    ids, mask, types = batch_for(ours.config)
    left = (ids.flip(1), mask.flip(1), types)
    assert_close(EMB, *run_both(ours, ref, left), left[1])


def test_a_table_with_more_rows_than_buckets_loads_and_saves(tiny_hf_checkpoint, tmp_path):
    # transformers reads 32 buckets whatever the table holds (compute_position_bias's default)
    folder = tiny_hf_checkpoint("fill-mask", model_type="mpnet",
                                relative_attention_num_buckets=40)
    ours, _, _ = check_family(folder, "fill-mask", tmp_path)
    assert ours.encoder.relative.table.weight.shape == (40, ours.config.num_attention_heads)
    assert ours.config.to_hf()["relative_attention_num_buckets"] == 40


def test_fewer_rows_than_buckets_is_one_clear_line():
    config = BertConfig(model_type="mpnet", type_vocab_size=0, pad_token_id=1,
                        relative_attention_num_buckets=16, hidden_size=32,
                        num_attention_heads=2)
    with pytest.raises(ConfigError) as err:
        build_model(config, EMB)
    assert "relative_attention_num_buckets 16" in str(err.value) and "\n" not in str(err.value)


def test_other_families_neither_read_nor_write_the_bucket_count():
    bert = BertConfig.from_hf({"model_type": "bert", "relative_attention_num_buckets": 64})
    assert "relative_attention_num_buckets" not in bert.to_hf()
    with pytest.raises(ConfigError, match="relative_attention_num_buckets=64 does not fit"):
        BertConfig(relative_attention_num_buckets=64)


def test_without_the_bias_the_model_misses_transformers(tiny_hf_checkpoint):
    _, ours, ref = _model_and_reference(tiny_hf_checkpoint)
    batch = batch_for(ours.config)
    with torch.no_grad():
        want = ref(input_ids=batch[0], attention_mask=batch[1]).last_hidden_state
        ours.encoder.relative.table.weight.zero_()
        got = ours(batch[0], batch[1])
    m = batch[1].bool()
    assert (got[m] - want[m]).abs().max() > 1e-2


@pytest.mark.parametrize("pad", [0, 3])
def test_positions_count_past_id_1_whatever_pad_token_id_says(tiny_hf_checkpoint, tmp_path, pad):
    """transformers' MPNetEmbeddings.padding_idx is 1, not config.pad_token_id: positions count
    every token but id 1 from 2 on — the pads of another id too (issue 43; reading
    pad_token_id numbered from pad + 1 and missed transformers while parity passed)."""
    folder = tiny_hf_checkpoint("text-classification", model_type="mpnet", pad_token_id=pad)
    ours, ref, _ = check_family(folder, "text-classification", tmp_path)  # right padding
    ids, mask, types = batch_for(ours.config)
    ids[0, 4] = 1  # an id-1 token mid-text takes the padding position, as in transformers
    for batch in ((ids, mask, types), (ids.flip(1), mask.flip(1), types)):
        assert_close("text-classification", *run_both(ours, ref, batch), batch[1])
        want = transformers.models.mpnet.modeling_mpnet.create_position_ids_from_input_ids(
            batch[0], 1)
        assert torch.equal(ours.encoder.embeddings.positions(batch[0]), want)
    assert ours.config.position_offset == 2
    assert usable_positions(ours.config.to_hf()) == ours.config.max_position_embeddings - 2
