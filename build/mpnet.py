"""MPNet's own piece: the relative-position bias every layer adds to its attention scores.

MPNet (Song et al. 2020) is BERT's post-LN encoder with RoBERTa's embeddings (no token types)
plus one learned table, relative_attention_num_buckets x heads, read through T5's
bidirectional log buckets of the distance key - query. transformers computes the (B, nh, T, T)
bias once per forward (MPNetEncoder.compute_position_bias) and hands the same tensor to every
layer; here it is (1, nh, T, T), broadcast over the batch when build/model.py's Encoder adds it
to the padding mask. Reference: transformers 4.57 models/mpnet/modeling_mpnet.py
(MPNetEncoder.compute_position_bias, relative_position_bucket).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from bertonnx.runtime.core.errors import ConfigError

from .config import BertConfig

# MPNetEncoder.forward calls compute_position_bias without num_buckets, so the buckets are
# always these (a table with more rows than 32 leaves the rest unread; fewer would not index)
NUM_BUCKETS = 32
MAX_DISTANCE = 128


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int = NUM_BUCKETS,
                             max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """transformers' MPNetEncoder.relative_position_bucket, op for op: half the buckets for keys
    after the query; within a half, exact distances below a quarter of the buckets, then
    log-spaced up to `max_distance`, the last bucket beyond."""
    ret = 0
    n = -relative_position
    num_buckets //= 2
    ret += (n < 0).to(torch.long) * num_buckets
    n = torch.abs(n)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    val_if_large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).to(torch.long)
    val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))
    return ret + torch.where(is_small, n, val_if_large)


class RelativePositionBias(nn.Module):
    """(1, nh, T, T): table[bucket(key - query)], one value per head."""

    def __init__(self, c: BertConfig):
        super().__init__()
        if c.relative_attention_num_buckets < NUM_BUCKETS:
            raise ConfigError(f"relative_attention_num_buckets {c.relative_attention_num_buckets}"
                              f" is fewer than the {NUM_BUCKETS} buckets MPNet reads",
                              f"use relative_attention_num_buckets >= {NUM_BUCKETS}")
        self.table = nn.Embedding(c.relative_attention_num_buckets, c.num_attention_heads)
        # The buckets depend only on the two positions: computed once here for every pair the
        # position table allows, and sliced in forward. The exported graph then holds a small
        # uint8 constant (buckets < 32) instead of the log/where arithmetic.
        pos = torch.arange(c.max_position_embeddings)
        buckets = relative_position_bucket(pos[None, :] - pos[:, None])  # (L, L): key - query
        self.register_buffer("buckets", buckets.to(torch.uint8), persistent=False)

    def forward(self, T: int) -> torch.Tensor:
        values = self.table(self.buckets[:T, :T].long())  # (T, T, nh)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, nh, T, T)
