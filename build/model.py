"""The scratch BERT encoder: embeddings, post-LN encoder layers, pooler.

Reference: Devlin et al. 2018 and transformers' modeling_bert (same math, so HF weights load
unchanged). Attention runs on `F.scaled_dot_product_attention`; its (B, nh, T, hs) layout and
additive mask are the ones onnxruntime's BERT fusion recognises after a TorchScript export.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig


def activation(name: str):
    return {
        "gelu": F.gelu,  # exact erf GELU, as in HF's "gelu"
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu,
        "silu": F.silu,
        "swish": F.silu,
    }[name]  # BertConfig already rejected anything else


class Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.position = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        # A sliced constant rather than arange(T): the Slice pattern is what onnxruntime's
        # EmbedLayerNormalization fusion recognises (arange exports as Range and does not fuse).
        self.register_buffer("position_ids", torch.arange(c.max_position_embeddings)[None],
                             persistent=False)

    def forward(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        positions = self.position_ids[:, :T]  # (1, T)
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions)
        return self.dropout(self.norm(x))  # (B, T, H)


class SelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.nh, self.hs = c.num_attention_heads, c.head_dim
        self.q = nn.Linear(c.hidden_size, c.hidden_size)
        self.k = nn.Linear(c.hidden_size, c.hidden_size)
        self.v = nn.Linear(c.hidden_size, c.hidden_size)
        self.out = nn.Linear(c.hidden_size, c.hidden_size)
        self.dropout_p = c.attention_probs_dropout_prob

    def split(self, x):  # (B, T, H) -> (B, nh, T, hs)
        B, T, _ = x.shape
        return x.view(B, T, self.nh, self.hs).transpose(1, 2)

    def forward(self, x, bias):  # bias: additive mask (B, 1, 1, T)
        B, T, H = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        p = self.dropout_p if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p)  # (B, nh, T, hs)
        return self.out(y.transpose(1, 2).reshape(B, T, H))


class FeedForward(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.up = nn.Linear(c.hidden_size, c.intermediate_size)
        self.down = nn.Linear(c.intermediate_size, c.hidden_size)
        self.act = activation(c.hidden_act)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class EncoderLayer(nn.Module):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.attn = SelfAttention(c)
        self.attn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.ffn = FeedForward(c)
        self.ffn_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)

    def forward(self, x, bias):
        x = self.attn_norm(x + self.dropout(self.attn(x, bias)))
        return self.ffn_norm(x + self.dropout(self.ffn(x)))


class Pooler(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, hidden):
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H) from [CLS]


class Encoder(nn.Module):
    """Embeddings + N encoder layers (+ pooler when the head needs one)."""

    def __init__(self, c: BertConfig, pooler: bool):
        super().__init__()
        self.embeddings = Embeddings(c)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.num_hidden_layers))
        self.pooler = Pooler(c) if pooler else None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        # Additive mask, 0 where attended and dtype-min where padded, broadcast over heads and
        # queries: the Sub/Mul pattern onnxruntime's attention fusion looks for.
        m = attention_mask[:, None, None, :].to(x.dtype)  # (B, 1, 1, T)
        bias = (1.0 - m) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        pooled = self.pooler(x) if self.pooler is not None else None
        return x, pooled


def init_weights(module: nn.Module, std: float) -> None:
    """HF BERT's initialisation: N(0, std) for weights, zeros for biases, LayerNorm 1/0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
