"""The scratch BERT encoder: embeddings, post-LN encoder layers, pooler.

Reference: Devlin et al. 2018 and transformers' modeling_bert (same math, so HF weights load
unchanged). The other families are switches on the same modules (config.family): RoBERTa's
padding-offset positions, DistilBERT's missing token types, ALBERT's and ELECTRA's embedding
projection, ALBERT's layer groups run in a schedule, no pooler where the family has none,
MPNet's relative-position bias (build/mpnet.py) added to the mask every layer reads,
DeBERTa's embeddings, disentangled attention and relative positions (build/deberta.py),
ModernBERT's pre-LN layers without biases, rotary global/windowed attention and GeGLU
(build/modernbert.py).
Attention runs on `F.scaled_dot_product_attention`; its (B, nh, T, hs) layout and additive mask
are the ones onnxruntime's BERT fusion recognises after a TorchScript export.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F
from torch import nn

from . import deberta, modernbert
from .config import BertConfig
from .modernbert import layer_norm
from .mpnet import RelativePositionBias


def activation(name: str):
    return {
        "gelu": F.gelu,  # exact erf GELU, as in HF's "gelu"
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "relu": F.relu,
        "silu": F.silu,
        "swish": F.silu,
        "tanh": torch.tanh,  # heads only (RoBERTa's classifier)
    }[name]  # BertConfig already rejected anything else


class Embeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        E = c.embedding_dim
        pad = c.family.padding_id(c.pad_token_id)  # MPNet: 1, whatever pad_token_id says
        self.word = nn.Embedding(c.vocab_size, E, padding_idx=pad)
        # ModernBERT's rotary attention takes positions in the layers: no table
        self.position = (None if c.family.attention == "rotary"
                         else nn.Embedding(c.max_position_embeddings, E))
        # DistilBERT has no segment embedding: token_type_ids are then ignored
        self.token_type = nn.Embedding(c.type_vocab_size, E) if c.type_vocab_size else None
        self.norm = layer_norm(c, E)
        self.dropout = nn.Dropout(c.hidden_dropout_prob)
        # ALBERT, ELECTRA: embeddings narrower than the layers are projected up after the norm
        self.project = nn.Linear(E, c.hidden_size) if c.embedding_projection else None
        # RoBERTa, MPNet: positions from the padding id, not from 0 (None: from 0)
        self.pad_offset = pad if c.family.positions_from_padding else None
        # A sliced constant rather than arange(T): the Slice pattern is what onnxruntime's
        # EmbedLayerNormalization fusion recognises (arange exports as Range and does not fuse).
        self.register_buffer("position_ids", torch.arange(c.max_position_embeddings)[None],
                             persistent=False)

    def positions(self, input_ids):
        if self.pad_offset is None:
            return self.position_ids[:, :input_ids.shape[1]]  # (1, T)
        # RoBERTa (fairseq make_positions), op for op as transformers writes it: pads keep
        # position pad_offset, tokens count from pad_offset + 1 wherever the padding is.
        keep = input_ids.ne(self.pad_offset).int()
        return (torch.cumsum(keep, dim=1).type_as(keep) * keep).long() + self.pad_offset  # (B, T)

    def forward(self, input_ids, token_type_ids):
        x = self.word(input_ids)
        pos = self.position(self.positions(input_ids)) if self.position is not None else None
        types = self.token_type(token_type_ids) if self.token_type is not None else None
        # Summed in the order onnxruntime's EmbedLayerNormalization fusion reads
        # (export/fusion.py): BERT's (word + type) + sliced positions; RoBERTa's computed
        # positions fuse only as (word + position) + type.
        for part in ((pos, types) if self.pad_offset is not None else (types, pos)):
            if part is not None:
                x = x + part
        x = self.dropout(self.norm(x))
        return x if self.project is None else self.project(x)  # (B, T, H)


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


def _every_layer(attention):
    """An attention that is the same at every depth: built without the layer's index."""
    return lambda c, index: attention(c)


# The family row's attention kind -> its attention (built from the config and the layer's
# index: ModernBERT's is global or windowed by depth), and the embeddings that go with it.
ATTENTION = {"sdpa": _every_layer(SelfAttention),
             "disentangled": _every_layer(deberta.DisentangledSelfAttention),
             "rotary": modernbert.RotaryAttention}
EMBEDDINGS = {"sdpa": Embeddings, "disentangled": deberta.Embeddings, "rotary": Embeddings}


class FeedForward(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.up = nn.Linear(c.hidden_size, c.intermediate_size)
        self.down = nn.Linear(c.intermediate_size, c.hidden_size)
        self.act = activation(c.hidden_act)

    def forward(self, x):
        return self.down(self.act(self.up(x)))


# The family row's feed-forward kind -> its module.
FEED_FORWARD = {"mlp": FeedForward,
                "geglu": lambda c: modernbert.GeGLU(c, activation(c.hidden_act))}


class EncoderLayer(nn.Module):
    """Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x)). Pre-LN (the row's `norm` "pre",
    ModernBERT): x = x + Attn(LN(x)); x = x + FFN(LN(x)), the first layer's attention norm an
    identity (the embeddings end in a norm)."""

    def __init__(self, c: BertConfig, index: int = 0):
        super().__init__()
        self.pre_norm = c.family.norm == "pre"
        self.attn = ATTENTION[c.family.attention](c, index)
        self.attn_norm = nn.Identity() if self.pre_norm and index == 0 else layer_norm(c)
        self.ffn = FEED_FORWARD[c.family.ffn](c)
        self.ffn_norm = layer_norm(c)
        # ModernBERT's dropouts are inside its attention and feed-forward
        self.dropout = nn.Dropout(0.0 if self.pre_norm else c.hidden_dropout_prob)

    def forward(self, x, bias):
        if self.pre_norm:
            x = x + self.attn(self.attn_norm(x), bias)
            return x + self.ffn(self.ffn_norm(x))
        # The sublayer's output is the Add's first operand: onnxruntime's attention fusion takes
        # the norm's first Add parent as the attention output, and after ALBERT's and ELECTRA's
        # embedding projection the residual is an Add too (export/fusion.py).
        x = self.attn_norm(self.dropout(self.attn(x, bias)) + x)
        return self.ffn_norm(self.dropout(self.ffn(x)) + x)


class Pooler(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.act = activation(c.pooler_hidden_act)  # tanh; DeBERTa's ContextPooler: GELU

    def forward(self, hidden):
        return self.act(self.dense(hidden[:, 0]))  # (B, H) from [CLS]


class LayerGroup(nn.ModuleList):
    """ALBERT: a group of layers run in sequence, the group itself reused across the depth."""

    def forward(self, x, bias):
        for layer in self:
            x = layer(x, bias)
        return x


class Encoder(nn.Module):
    """Embeddings + N encoder layers (+ pooler when the head needs one)."""

    def __init__(self, c: BertConfig, pooler: bool):
        super().__init__()
        self.embeddings = EMBEDDINGS[c.family.attention](c)
        if c.family.shared_layers:  # ALBERT: encoder.layers.{group}.{inner}
            self.layers = nn.ModuleList(
                LayerGroup(EncoderLayer(c) for _ in range(c.inner_group_num))
                for _ in range(c.num_hidden_groups))
        else:
            self.layers = nn.ModuleList(EncoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.schedule = c.layer_schedule  # which of self.layers runs at each depth
        # MPNet: one relative-position bias, computed once and added to every layer's scores
        self.relative = RelativePositionBias(c) if c.family.relative_bias else None
        # DeBERTa: relative embeddings and the bucket index, made once for every layer
        self.rel_positions = (deberta.RelativePositions(c) if c.family.attention == "disentangled"
                              else None)
        # ModernBERT: the rotary tables and the window's mask, made once for every layer
        self.rotary = (modernbert.AttentionInputs(c) if c.family.attention == "rotary"
                       else None)
        # a pre-LN stack ends in a norm (ModernBERT's final_norm)
        self.final_norm = layer_norm(c) if c.family.norm == "pre" else None
        self.pooler = Pooler(c) if pooler else None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None and self.embeddings.token_type is not None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        # Additive mask, 0 where attended and dtype-min where padded, broadcast over heads and
        # queries: the Sub/Mul pattern onnxruntime's attention fusion looks for.
        m = attention_mask[:, None, None, :].to(x.dtype)  # (B, 1, 1, T)
        bias = (1.0 - m) * torch.finfo(x.dtype).min
        if self.relative is not None:
            bias = bias + self.relative(x.shape[1])  # (B, nh, T, T)
        if self.rel_positions is not None:  # what DisentangledSelfAttention reads beside it
            bias = (bias, self.rel_positions(x))
        if self.rotary is not None:  # what RotaryAttention reads instead of the bare mask
            bias = self.rotary(bias)
        for i in self.schedule:
            x = self.layers[i](x, bias)
        if self.final_norm is not None:
            x = self.final_norm(x)
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
            if m.bias is not None:  # ModernBERT's norms have none
                nn.init.zeros_(m.bias)
