"""The one declarative HF <-> ours key table, used both ways (load and save).

Templates use `{}` for the layer index; `None` means the HF key is dropped on load (a buffer, or a
weight tied to another). A regex turns a real key into its template. Reference: gpt-fast's
convert_hf_checkpoint and litgpt's weight maps.
"""
from __future__ import annotations

import re

HF_TO_OURS: dict[str, str | None] = {
    "bert.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "bert.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "bert.embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "bert.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "bert.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "bert.embeddings.position_ids": None,  # a buffer (arange), recomputed in forward
    "bert.encoder.layer.{}.attention.self.query.weight": "encoder.layers.{}.attn.q.weight",
    "bert.encoder.layer.{}.attention.self.query.bias": "encoder.layers.{}.attn.q.bias",
    "bert.encoder.layer.{}.attention.self.key.weight": "encoder.layers.{}.attn.k.weight",
    "bert.encoder.layer.{}.attention.self.key.bias": "encoder.layers.{}.attn.k.bias",
    "bert.encoder.layer.{}.attention.self.value.weight": "encoder.layers.{}.attn.v.weight",
    "bert.encoder.layer.{}.attention.self.value.bias": "encoder.layers.{}.attn.v.bias",
    "bert.encoder.layer.{}.attention.output.dense.weight": "encoder.layers.{}.attn.out.weight",
    "bert.encoder.layer.{}.attention.output.dense.bias": "encoder.layers.{}.attn.out.bias",
    "bert.encoder.layer.{}.attention.output.LayerNorm.weight": "encoder.layers.{}.attn_norm.weight",
    "bert.encoder.layer.{}.attention.output.LayerNorm.bias": "encoder.layers.{}.attn_norm.bias",
    "bert.encoder.layer.{}.intermediate.dense.weight": "encoder.layers.{}.ffn.up.weight",
    "bert.encoder.layer.{}.intermediate.dense.bias": "encoder.layers.{}.ffn.up.bias",
    "bert.encoder.layer.{}.output.dense.weight": "encoder.layers.{}.ffn.down.weight",
    "bert.encoder.layer.{}.output.dense.bias": "encoder.layers.{}.ffn.down.bias",
    "bert.encoder.layer.{}.output.LayerNorm.weight": "encoder.layers.{}.ffn_norm.weight",
    "bert.encoder.layer.{}.output.LayerNorm.bias": "encoder.layers.{}.ffn_norm.bias",
    "bert.pooler.dense.weight": "encoder.pooler.dense.weight",
    "bert.pooler.dense.bias": "encoder.pooler.dense.bias",
    # MLM head (BertForMaskedLM / BertForPreTraining)
    "cls.predictions.transform.dense.weight": "head.mlm.dense.weight",
    "cls.predictions.transform.dense.bias": "head.mlm.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head.mlm.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head.mlm.norm.bias",
    "cls.predictions.bias": "head.mlm.bias",
    "cls.predictions.decoder.weight": None,  # tied to the word embeddings
    "cls.predictions.decoder.bias": None,    # the same tensor as cls.predictions.bias
    # NSP head (BertForPreTraining, BertForNextSentencePrediction)
    "cls.seq_relationship.weight": "head.nsp.weight",
    "cls.seq_relationship.bias": "head.nsp.bias",
    # sequence and token classification share HF's key names
    "classifier.weight": "head.classifier.weight",
    "classifier.bias": "head.classifier.bias",
    "qa_outputs.weight": "head.qa.weight",
    "qa_outputs.bias": "head.qa.bias",
}
OURS_TO_HF: dict[str, str] = {v: k for k, v in HF_TO_OURS.items() if v is not None}

_LAYER = re.compile(r"\.(\d+)\.")
# BertModel checkpoints carry no "bert." prefix; TF-converted ones name LayerNorm gamma/beta.
_ENCODER_ROOTS = ("embeddings.", "encoder.", "pooler.")
_TF_NAMES = ((".gamma", ".weight"), (".beta", ".bias"))


def normalize_hf_key(key: str) -> str:
    if key.startswith(_ENCODER_ROOTS):
        key = "bert." + key
    for old, new in _TF_NAMES:
        if key.endswith(old) and "LayerNorm" in key:
            key = key[: -len(old)] + new
    return key


def template(key: str) -> tuple[str, str | None]:
    """'a.3.b' -> ('a.{}.b', '3'); keys without a layer index give (key, None)."""
    m = _LAYER.search(key)
    if m is None:
        return key, None
    return key[: m.start()] + ".{}." + key[m.end():], m.group(1)


def hf_to_ours(key: str) -> str | None:
    """Ours for an HF key; None if the key is dropped; KeyError if the table does not know it."""
    tmpl, idx = template(normalize_hf_key(key))
    ours = HF_TO_OURS[tmpl]
    return None if ours is None else ours.format(idx)


def ours_to_hf(key: str) -> str:
    tmpl, idx = template(key)
    return OURS_TO_HF[tmpl].format(idx)
