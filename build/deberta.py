"""DeBERTa-v2/v3's own pieces on the one encoder: embeddings, relative positions, disentangled
attention.

DeBERTa (He et al. 2021; v3: He et al. 2023) is BERT's post-LN encoder in which attention adds
two terms to content-to-content: content-to-position (each query against the embedding of its
bucketed distance to each key) and position-to-content (each key against the embedding of the
distance seen from the query), all three scaled by sqrt(head_size * terms). The distances are
log-bucketed past half the buckets; the bucket embeddings (LayerNorm-ed in v3) and the
(T, T) bucket index are computed once per forward and shared by every layer, which projects
them with its own key/query weights (`share_att_key`) or with separate ones. v3 has no absolute
positions (`position_biased_input` false) and no token types. Reference: transformers 4.57,
models/deberta_v2/modeling_deberta_v2.py (DebertaV2Embeddings, DebertaV2Encoder,
DisentangledSelfAttention, make_log_bucket_position); the heads are heads.py's (the MLM head
is BERT's under either of DeBERTa's names, the ContextPooler the encoder's pooler).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bertonnx.runtime.core.errors import ConfigError

from .config import BertConfig


def log_bucket(relative: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """transformers' make_log_bucket_position, op for op: distances below half the buckets
    kept, longer ones log-spaced so that max_position - 1 lands on the last bucket."""
    sign = torch.sign(relative)
    mid = bucket_size // 2
    abs_pos = torch.where((relative < mid) & (relative > -mid),
                          torch.tensor(mid - 1).type_as(relative), torch.abs(relative))
    log_pos = torch.ceil(torch.log(abs_pos / mid)
                         / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative.type_as(log_pos), log_pos * sign)


def max_relative(c: BertConfig) -> int:
    """transformers' max_relative_positions: the config's, or the position table's size."""
    return c.max_relative_positions if c.max_relative_positions >= 1 else \
        c.max_position_embeddings


def span(c: BertConfig) -> int:
    """Half the rows of the relative embedding table (transformers' `pos_ebd_size`)."""
    return c.position_buckets if c.position_buckets > 0 else max_relative(c)


def index_table(c: BertConfig) -> tuple[torch.Tensor, int]:
    """(table, reach): the row of the relative embeddings that a distance d = query - key
    reads is table[clamp(d, -reach, reach) + reach], as transformers' clamp(bucket(d) + span,
    0, 2 * span - 1) picks it.

    Past `reach` the row no longer changes (the bucket is clamped to the table's edge), so one
    small constant serves every sequence length and the graph does no float arithmetic on
    positions. The reach is found on the buckets themselves, far past where they settle; the
    rows never decrease with d (RelativePositions relies on it), else the config is refused."""
    s, n = span(c), 4 * max(span(c), max_relative(c)) + 4
    d = torch.arange(-n, n + 1)
    bucket = log_bucket(d, c.position_buckets, max_relative(c)) if c.position_buckets > 0 else d
    rows = torch.clamp(bucket.long() + s, 0, 2 * s - 1)
    reach = 0
    for side in (rows[n:], rows[:n + 1].flip(0)):  # d = 0..n, then 0..-n
        moving = (side != side[-1]).nonzero()
        reach = max(reach, int(moving[-1]) + 1 if len(moving) else 0)
    table = rows[n - reach:n + reach + 1]
    if reach > n // 2 or (table[1:] < table[:-1]).any():  # RelativePositions needs both
        raise ConfigError(f"position_buckets {c.position_buckets} with max_relative_positions "
                          f"{max_relative(c)} give buckets that do not settle in order",
                          "use DeBERTa-v2/v3's own position_buckets 256 (or -1)")
    return table.clone(), reach


class Embeddings(nn.Module):
    """word (+ absolute position if position_biased_input) (+ token type) -> Linear to hidden
    (no bias) when embedding_size differs -> LayerNorm over hidden -> dropout.

    transformers then multiplies by the padding mask; that only zeroes padded rows, which no
    unpadded token attends to (the attention mask), so it is left out."""

    def __init__(self, c: BertConfig):
        super().__init__()
        E = c.embedding_dim
        self.word = nn.Embedding(c.vocab_size, E, padding_idx=c.pad_token_id)
        self.position = (nn.Embedding(c.max_position_embeddings, E)
                         if c.position_biased_input else None)
        self.token_type = nn.Embedding(c.type_vocab_size, E) if c.type_vocab_size else None
        self.project = nn.Linear(E, c.hidden_size, bias=False) if E != c.hidden_size else None
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids):
        x = self.word(input_ids)
        if self.position is not None:
            x = x + self.position.weight[:input_ids.shape[1]]  # positions 0..T-1
        if self.token_type is not None:
            x = x + self.token_type(token_type_ids)
        if self.project is not None:
            x = self.project(x)
        return self.dropout(self.norm(x))  # (B, T, H)


class RelativePositions(nn.Module):
    """Once per forward, for every layer: the relative embeddings (2 * span, H), LayerNorm-ed
    where norm_rel_ebd says so, and the (T, T) row index of each query-key pair; None without
    relative attention."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.embeddings = self.norm = None
        if "layer_norm" in [x.strip() for x in c.norm_rel_ebd.lower().split("|")]:
            # made (and saved) without relative attention too, as transformers makes it
            self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        if not c.relative_attention:
            return
        self.embeddings = nn.Embedding(2 * span(c), c.hidden_size)
        table, self.reach = index_table(c)
        self.register_buffer("table", table, persistent=False)

    def forward(self, x):
        if self.embeddings is None:
            return None
        rel = self.embeddings.weight
        if self.norm is not None:
            rel = self.norm(rel)
        pos = torch.arange(x.shape[1], device=x.device)  # T from the graph: a dynamic Range
        d = pos[:, None] - pos[None, :]  # (T, T): query - key
        index = self.table[d.clamp(-self.reach, self.reach) + self.reach]
        # Rows are non-decreasing in d, so T tokens read only rows index[0, T-1] (d = 1 - T) to
        # index[T-1, 0]: the layers score against those (2T - 1 rows at most, not 2 * span).
        first, last = index[0, -1], index[-1, 0]
        return rel, index - first, first, last + 1


class DisentangledSelfAttention(nn.Module):
    """Content-to-content + content-to-position (c2p) + position-to-content (p2c) scores.

    c2p[i, j] = q_i . pos_k[row(i - j)] and p2c[i, j] = k_j . pos_q[row(i - j)] (transformers'
    p2c index, -bucket(j - i), is the same row: the buckets are odd in d), so one (T, T) index
    serves both, gathered along the keys for c2p and along the queries for p2c. Attribute
    names follow SelfAttention's (q, k, v, out): the key table and training see one layer."""

    def __init__(self, c: BertConfig):
        super().__init__()
        H = c.hidden_size
        self.nh, self.hs = c.num_attention_heads, c.head_dim
        self.q, self.k, self.v, self.out = (nn.Linear(H, H) for _ in range(4))
        self.c2p, self.p2c = "c2p" in c.pos_att_type, "p2c" in c.pos_att_type
        # transformers counts the terms named in pos_att_type, relative attention or not
        self.scale = math.sqrt(self.hs * (1 + self.c2p + self.p2c))
        self.pos_k = self.pos_q = None
        if c.relative_attention and not c.share_att_key:
            self.pos_k = nn.Linear(H, H) if self.c2p else None
            self.pos_q = nn.Linear(H, H) if self.p2c else None
        self.dropout = nn.Dropout(c.attention_probs_dropout_prob)
        self.pos_dropout = nn.Dropout(c.hidden_dropout_prob)

    def split(self, x):  # (B, T, H) -> (B, nh, T, hs)
        B, T, _ = x.shape
        return x.view(B, T, self.nh, self.hs).transpose(1, 2)

    def forward(self, x, bias):
        """`bias`: (additive padding mask (B, 1, 1, T), RelativePositions' output or None)."""
        bias, relative = bias
        B, T, H = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ (k.transpose(-1, -2) / self.scale)  # (B, nh, T, T)
        if relative is not None:
            scores = scores + self.relative_scores(q, k, *relative)
        p = self.dropout(F.softmax(scores + bias, dim=-1))
        y = p @ v  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).reshape(B, T, H))

    def relative_scores(self, q, k, rel, index, first, end):
        """`index` counts from row `first`; rows first..end-1 are the ones T tokens read. The
        rows are projected whole (weights only: onnxruntime folds them at load), then cut."""
        rel = self.pos_dropout(rel)[None]  # (1, 2 * span, H)
        B, nh, T, _ = q.shape
        score = 0
        if self.c2p:
            pos_k = self.split(self.pos_k(rel) if self.pos_k is not None else self.k(rel))
            c2p = q @ pos_k[:, :, first:end].transpose(-1, -2)  # (B, nh, T, R), R <= 2T - 1
            c2p = torch.gather(c2p, -1, index.expand(B, nh, T, T))
            score = score + c2p / self.scale
        if self.p2c:
            pos_q = self.split(self.pos_q(rel) if self.pos_q is not None else self.q(rel))
            p2c = k @ pos_q[:, :, first:end].transpose(-1, -2)  # (B, nh, T, R): key j, row r
            p2c = torch.gather(p2c, -1, index.transpose(0, 1).expand(B, nh, T, T))
            score = score + p2c.transpose(-1, -2) / self.scale
        return score
