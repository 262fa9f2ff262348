"""ModernBERT's own pieces on the one encoder: rotary attention over global and sliding-window
layers, the GeGLU feed-forward, and the heads that sit on its prediction head.

ModernBERT (Warner et al. 2024) is a pre-LN encoder (build/model.py's EncoderLayer with its row's
`norm` "pre": the first layer's attention norm an identity, a final norm after the last layer)
whose linear layers and norms carry no bias by default (config attention_bias, mlp_bias,
norm_bias, classifier_bias false). Its embeddings are the token table and a norm: positions
enter as rotary embeddings on queries and keys, base `global_rope_theta` in every
`global_attn_every_n_layers`-th layer (layer_id % n == 0), which attends globally, and
`local_rope_theta` in the others, which attend only to keys within local_attention // 2
positions of the query. The rotary tables and the window's additive mask are computed once per
forward (`AttentionInputs`) and read by every layer. The feed-forward is a GeGLU: Wi projects
to twice the intermediate size, act(first half) * second half, then Wo.

Reference: transformers 4.57 models/modernbert/modeling_modernbert.py on its eager / sdpa path
(`ModernBertModel._update_attention_mask`, `sdpa_attention_forward`, `apply_rotary_pos_emb`,
`ModernBertMLP`, `ModernBertPredictionHead` and the For* classes). Its flash-attention path
unpads the batch; at unpadded positions it computes the same numbers.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig

Activation = Callable[[torch.Tensor], torch.Tensor]

# transformers' names <-> ours (build/keys.py's table for the family, kept here beside the
# modules it names). The `.bias` keys exist only where the config turns the bias on.
_L = "model.layers.{}"
_BOTH = ("weight", "bias")
KEYS: dict[str, str | None] = {
    "model.embeddings.tok_embeddings.weight": "encoder.embeddings.word.weight",
    **{f"model.embeddings.norm.{p}": f"encoder.embeddings.norm.{p}" for p in _BOTH},
    **{f"{_L}.{hf}.{p}": f"encoder.layers.{{}}.{ours}.{p}" for p in _BOTH for hf, ours in (
        ("attn_norm", "attn_norm"), ("attn.Wqkv", "attn.qkv"), ("attn.Wo", "attn.out"),
        ("mlp_norm", "ffn_norm"), ("mlp.Wi", "ffn.up"), ("mlp.Wo", "ffn.down"))},
    **{f"model.final_norm.{p}": f"encoder.final_norm.{p}" for p in _BOTH},
    # every head's ModernBertPredictionHead, then the MLM decoder or the task's classifier
    **{f"head.{n}.{p}": f"head.{n}.{p}" for n in ("dense", "norm") for p in _BOTH},
    "decoder.weight": None,  # tied to the token embeddings
    "decoder.bias": "head.bias",
    "classifier.weight": "head.classifier.weight",
    "classifier.bias": "head.classifier.bias",
}


def layer_norm(c: BertConfig, width: int | None = None) -> nn.LayerNorm:
    """A norm as the family has it: ModernBERT's have no bias (config norm_bias)."""
    return nn.LayerNorm(width or c.hidden_size, eps=c.layer_norm_eps, bias=c.norm_bias)


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """transformers' default rope: 1 / theta^(2i / d) for i < d / 2, in float32."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta ** exponents)


class Rope(NamedTuple):
    cos: torch.Tensor  # (1, 1, T, hs)
    sin: torch.Tensor


class Context(NamedTuple):
    """What every layer's attention reads, computed once per forward: the additive masks
    (global: padding only, (B, 1, 1, T); local: padding and the window, (B, 1, T, T)) and the
    rotary tables of the two bases."""
    global_bias: torch.Tensor
    local_bias: torch.Tensor
    global_rope: Rope
    local_rope: Rope


class AttentionInputs(nn.Module):
    """The per-forward `Context` from the padding mask (B, 1, 1, T): 0 attended, dtype-min not."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.half_window = c.local_attention // 2
        hs = c.head_dim
        self.register_buffer("global_freq", inverse_frequencies(hs, c.global_rope_theta),
                             persistent=False)
        self.register_buffer("local_freq", inverse_frequencies(hs, c.local_rope_theta),
                             persistent=False)

    @staticmethod
    def rope(freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> Rope:
        # position x frequency is one product per entry, as transformers' outer product by
        # matmul is: the same float32 numbers
        angles = positions[:, None] * freq[None, :]  # (T, hs/2)
        emb = torch.cat((angles, angles), dim=-1)  # (T, hs)
        return Rope(emb.cos()[None, None].to(dtype), emb.sin()[None, None].to(dtype))

    def forward(self, bias: torch.Tensor) -> Context:
        T = bias.shape[-1]
        pos = torch.arange(T, device=bias.device)
        # keys more than half the window from the query are masked like padding, with the
        # dtype's min (not -inf): a padded query whose window holds only padding keeps a
        # finite softmax row, so no NaN reaches the unpadded rows through its values
        far = (pos[None, :] - pos[:, None]).abs() > self.half_window  # (T, T)
        local = bias.masked_fill(far[None, None], torch.finfo(bias.dtype).min)  # (B, 1, T, T)
        positions = pos.float()
        return Context(bias, local, self.rope(self.global_freq, positions, bias.dtype),
                       self.rope(self.local_freq, positions, bias.dtype))


def rotate(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1) over the halves of hs."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * rope.cos + turned * rope.sin


class RotaryAttention(nn.Module):
    """Self-attention with rotary queries and keys; local (windowed) unless the layer's index is
    a multiple of global_attn_every_n_layers. One packed Wqkv projection, as transformers'."""

    def __init__(self, c: BertConfig, index: int):
        super().__init__()
        self.nh, self.hs = c.num_attention_heads, c.head_dim
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size, bias=c.attention_bias)
        self.out = nn.Linear(c.hidden_size, c.hidden_size, bias=c.attention_bias)
        self.local = index % c.global_attn_every_n_layers != 0
        self.dropout_p = c.attention_probs_dropout_prob
        self.out_drop = nn.Dropout(c.attention_probs_dropout_prob)

    def forward(self, x, ctx: Context):
        B, T, H = x.shape
        # (B, T, 3, nh, hs) -> 3 x (B, nh, T, hs)
        q, k, v = self.qkv(x).view(B, T, 3, self.nh, self.hs).permute(2, 0, 3, 1, 4).unbind(0)
        rope = ctx.local_rope if self.local else ctx.global_rope
        q, k = rotate(q, rope), rotate(k, rope)
        bias = ctx.local_bias if self.local else ctx.global_bias
        p = self.dropout_p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)  # (B, nh, T, hs)
        return self.out_drop(self.out(y.transpose(1, 2).reshape(B, T, H)))


class GeGLU(nn.Module):
    """Wi -> (input, gate) halves -> act(input) * gate -> Wo (transformers' ModernBertMLP)."""

    def __init__(self, c: BertConfig, act: Activation):
        super().__init__()
        self.up = nn.Linear(c.hidden_size, 2 * c.intermediate_size, bias=c.mlp_bias)
        self.down = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)
        self.act = act
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, x):
        h, gate = self.up(x).chunk(2, dim=-1)
        return self.down(self.dropout(self.act(h) * gate))


# --- heads: each is transformers' ModernBertPredictionHead (dense -> act -> norm), then its own.
# Built as build/heads.py builds every head, on the config and the encoder, with the config's
# classifier_activation resolved there.

class _PredictionHead(nn.Module):
    def __init__(self, c: BertConfig, enc: nn.Module, act: Activation):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size, bias=c.classifier_bias)
        self.act = act
        self.norm = layer_norm(c)

    def transform(self, x):
        return self.norm(self.act(self.dense(x)))


class MaskedLMHead(_PredictionHead):
    """ModernBertForMaskedLM: the prediction head, then the decoder tied to the token table
    (with its own bias unless decoder_bias is false): (B, T, V)."""

    def __init__(self, c: BertConfig, enc: nn.Module, act: Activation):
        super().__init__(c, enc, act)
        self.bias = nn.Parameter(torch.zeros(c.vocab_size)) if c.decoder_bias else None
        self.vocab_size = c.vocab_size
        self._tied = (enc.embeddings.word,)  # borrowed, not registered: the encoder owns (and saves) it

    def forward(self, hidden, pooled, mlm_positions=None):
        if mlm_positions is not None:  # training: the masked positions only, (N, V)
            return F.linear(self.transform(hidden[mlm_positions]), self._tied[0].weight,
                            self.bias)
        h = self.transform(hidden)
        B, T, H = h.shape
        # 2-D, so the export reads the table in a Gemm rather than copying it (heads.MLMHead)
        logits = F.linear(h.reshape(B * T, H), self._tied[0].weight, self.bias)
        return logits.view(B, T, self.vocab_size)


class SequenceHead(_PredictionHead):
    """ModernBertForSequenceClassification: the [CLS] vector or the mean over unpadded tokens
    (config classifier_pooling), the prediction head, dropout, classifier: (B, L)."""

    takes_mask = True  # heads.Bert passes the attention mask: mean pooling reads it

    def __init__(self, c: BertConfig, enc: nn.Module, act: Activation):
        super().__init__(c, enc, act)
        self.mean = c.classifier_pooling == "mean"
        self.dropout = nn.Dropout(c.classifier_dropout_p)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled, attention_mask):
        if self.mean:
            m = attention_mask.unsqueeze(-1)  # (B, T, 1)
            x = (hidden * m).sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)
        else:
            x = hidden[:, 0]
        return self.classifier(self.dropout(self.transform(x)))


class TokenHead(_PredictionHead):
    """ModernBertForTokenClassification: prediction head, dropout, classifier: (B, T, L)."""

    def __init__(self, c: BertConfig, enc: nn.Module, act: Activation):
        super().__init__(c, enc, act)
        self.dropout = nn.Dropout(c.classifier_dropout_p)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled):
        return self.classifier(self.dropout(self.transform(hidden)))


class SpanHead(_PredictionHead):
    """ModernBertForQuestionAnswering: prediction head, dropout, a 2-way classifier split into
    start and end logits, each (B, T)."""

    def __init__(self, c: BertConfig, enc: nn.Module, act: Activation):
        super().__init__(c, enc, act)
        self.dropout = nn.Dropout(c.classifier_dropout_p)
        self.classifier = nn.Linear(c.hidden_size, 2)

    def forward(self, hidden, pooled):
        start, end = self.classifier(self.dropout(self.transform(hidden))).unbind(-1)
        return start, end
