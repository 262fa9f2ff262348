"""The declarative HF <-> ours key tables, one per family, each used both ways (load and save).

Templates use `{}` for each layer index; `None` means the HF key is dropped on load (a buffer, a
weight tied to another, or a pretraining head no task serves). A regex turns a real key into its
template. `KEY_TABLES` keys them by the base model's attribute, the name a family's row
(runtime/core/families.py `key_map`) gives; `key_table` finds a model_type's. Reference:
gpt-fast's convert_hf_checkpoint and litgpt's weight maps; the HF names are transformers 4.57's
modeling_*.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType

from bertonnx.runtime.core.families import DEFAULT_MODEL_TYPE, family

from .modernbert import KEYS as MODERNBERT  # its table, beside its modules


def _bert_body(p: str) -> dict[str, str | None]:
    """BERT's encoder under the base-model prefix `p`: RoBERTa and ELECTRA keep its names."""
    return {
        f"{p}.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
        f"{p}.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
        f"{p}.embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
        f"{p}.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
        f"{p}.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
        f"{p}.embeddings.position_ids": None,  # a buffer (arange), recomputed in forward
        f"{p}.embeddings.token_type_ids": None,  # a buffer of zeros (older RoBERTa checkpoints)
        f"{p}.encoder.layer.{{}}.attention.self.query.weight": "encoder.layers.{}.attn.q.weight",
        f"{p}.encoder.layer.{{}}.attention.self.query.bias": "encoder.layers.{}.attn.q.bias",
        f"{p}.encoder.layer.{{}}.attention.self.key.weight": "encoder.layers.{}.attn.k.weight",
        f"{p}.encoder.layer.{{}}.attention.self.key.bias": "encoder.layers.{}.attn.k.bias",
        f"{p}.encoder.layer.{{}}.attention.self.value.weight": "encoder.layers.{}.attn.v.weight",
        f"{p}.encoder.layer.{{}}.attention.self.value.bias": "encoder.layers.{}.attn.v.bias",
        f"{p}.encoder.layer.{{}}.attention.output.dense.weight":
            "encoder.layers.{}.attn.out.weight",
        f"{p}.encoder.layer.{{}}.attention.output.dense.bias": "encoder.layers.{}.attn.out.bias",
        f"{p}.encoder.layer.{{}}.attention.output.LayerNorm.weight":
            "encoder.layers.{}.attn_norm.weight",
        f"{p}.encoder.layer.{{}}.attention.output.LayerNorm.bias":
            "encoder.layers.{}.attn_norm.bias",
        f"{p}.encoder.layer.{{}}.intermediate.dense.weight": "encoder.layers.{}.ffn.up.weight",
        f"{p}.encoder.layer.{{}}.intermediate.dense.bias": "encoder.layers.{}.ffn.up.bias",
        f"{p}.encoder.layer.{{}}.output.dense.weight": "encoder.layers.{}.ffn.down.weight",
        f"{p}.encoder.layer.{{}}.output.dense.bias": "encoder.layers.{}.ffn.down.bias",
        f"{p}.encoder.layer.{{}}.output.LayerNorm.weight": "encoder.layers.{}.ffn_norm.weight",
        f"{p}.encoder.layer.{{}}.output.LayerNorm.bias": "encoder.layers.{}.ffn_norm.bias",
    }


# Heads every family names alike: token classification and extractive QA.
_TOKEN_AND_SPAN = {
    "classifier.weight": "head.classifier.weight",  # BERT, ALBERT: sequence classification too
    "classifier.bias": "head.classifier.bias",
    "qa_outputs.weight": "head.qa.weight",
    "qa_outputs.bias": "head.qa.bias",
}

BERT: dict[str, str | None] = {
    **_bert_body("bert"),
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
    **_TOKEN_AND_SPAN,
}

# RoBERTa, XLM-RoBERTa and CamemBERT (all three name their base model `roberta`).
ROBERTA: dict[str, str | None] = {
    **_bert_body("roberta"),
    "roberta.pooler.dense.weight": "encoder.pooler.dense.weight",
    "roberta.pooler.dense.bias": "encoder.pooler.dense.bias",
    "lm_head.dense.weight": "head.mlm.dense.weight",
    "lm_head.dense.bias": "head.mlm.dense.bias",
    "lm_head.layer_norm.weight": "head.mlm.norm.weight",
    "lm_head.layer_norm.bias": "head.mlm.norm.bias",
    "lm_head.bias": "head.mlm.bias",
    "lm_head.decoder.weight": None,  # tied to the word embeddings
    "lm_head.decoder.bias": None,    # the same tensor as lm_head.bias
    # RobertaClassificationHead; token classification keeps the bare `classifier.*`
    "classifier.dense.weight": "head.dense.weight",
    "classifier.dense.bias": "head.dense.bias",
    "classifier.out_proj.weight": "head.out_proj.weight",
    "classifier.out_proj.bias": "head.out_proj.bias",
    **_TOKEN_AND_SPAN,
}

ELECTRA: dict[str, str | None] = {
    **_bert_body("electra"),  # no pooler
    "electra.embeddings_project.weight": "encoder.embeddings.project.weight",
    "electra.embeddings_project.bias": "encoder.embeddings.project.bias",
    # the generator's MLM head (ElectraForMaskedLM)
    "generator_predictions.dense.weight": "head.mlm.dense.weight",
    "generator_predictions.dense.bias": "head.mlm.dense.bias",
    "generator_predictions.LayerNorm.weight": "head.mlm.norm.weight",
    "generator_predictions.LayerNorm.bias": "head.mlm.norm.bias",
    "generator_lm_head.bias": "head.mlm.bias",
    "generator_lm_head.weight": None,  # tied to the word embeddings
    # the discriminator's replaced-token detector (ElectraForPreTraining): no task serves it
    "discriminator_predictions.dense.weight": None,
    "discriminator_predictions.dense.bias": None,
    "discriminator_predictions.dense_prediction.weight": None,
    "discriminator_predictions.dense_prediction.bias": None,
    # ElectraClassificationHead
    "classifier.dense.weight": "head.dense.weight",
    "classifier.dense.bias": "head.dense.bias",
    "classifier.out_proj.weight": "head.out_proj.weight",
    "classifier.out_proj.bias": "head.out_proj.bias",
    **_TOKEN_AND_SPAN,
}

_D = "distilbert.transformer.layer.{}"
DISTILBERT: dict[str, str | None] = {
    "distilbert.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "distilbert.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "distilbert.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "distilbert.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "distilbert.embeddings.position_ids": None,
    f"{_D}.attention.q_lin.weight": "encoder.layers.{}.attn.q.weight",
    f"{_D}.attention.q_lin.bias": "encoder.layers.{}.attn.q.bias",
    f"{_D}.attention.k_lin.weight": "encoder.layers.{}.attn.k.weight",
    f"{_D}.attention.k_lin.bias": "encoder.layers.{}.attn.k.bias",
    f"{_D}.attention.v_lin.weight": "encoder.layers.{}.attn.v.weight",
    f"{_D}.attention.v_lin.bias": "encoder.layers.{}.attn.v.bias",
    f"{_D}.attention.out_lin.weight": "encoder.layers.{}.attn.out.weight",
    f"{_D}.attention.out_lin.bias": "encoder.layers.{}.attn.out.bias",
    f"{_D}.sa_layer_norm.weight": "encoder.layers.{}.attn_norm.weight",
    f"{_D}.sa_layer_norm.bias": "encoder.layers.{}.attn_norm.bias",
    f"{_D}.ffn.lin1.weight": "encoder.layers.{}.ffn.up.weight",
    f"{_D}.ffn.lin1.bias": "encoder.layers.{}.ffn.up.bias",
    f"{_D}.ffn.lin2.weight": "encoder.layers.{}.ffn.down.weight",
    f"{_D}.ffn.lin2.bias": "encoder.layers.{}.ffn.down.bias",
    f"{_D}.output_layer_norm.weight": "encoder.layers.{}.ffn_norm.weight",
    f"{_D}.output_layer_norm.bias": "encoder.layers.{}.ffn_norm.bias",
    "vocab_transform.weight": "head.mlm.dense.weight",
    "vocab_transform.bias": "head.mlm.dense.bias",
    "vocab_layer_norm.weight": "head.mlm.norm.weight",
    "vocab_layer_norm.bias": "head.mlm.norm.bias",
    "vocab_projector.bias": "head.mlm.bias",  # not tied: only the weight is
    "vocab_projector.weight": None,           # tied to the word embeddings
    # sequence classification: pre_classifier -> ReLU -> classifier (the bare name again)
    "pre_classifier.weight": "head.pre_classifier.weight",
    "pre_classifier.bias": "head.pre_classifier.bias",
    **_TOKEN_AND_SPAN,
}

# ALBERT: layer groups of inner layers, {group}.{inner}; the encoder runs group i // (N / G).
_A = "albert.encoder.albert_layer_groups.{}.albert_layers.{}"
ALBERT: dict[str, str | None] = {
    "albert.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "albert.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "albert.embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "albert.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "albert.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "albert.embeddings.position_ids": None,
    "albert.embeddings.token_type_ids": None,
    "albert.encoder.embedding_hidden_mapping_in.weight": "encoder.embeddings.project.weight",
    "albert.encoder.embedding_hidden_mapping_in.bias": "encoder.embeddings.project.bias",
    f"{_A}.attention.query.weight": "encoder.layers.{}.{}.attn.q.weight",
    f"{_A}.attention.query.bias": "encoder.layers.{}.{}.attn.q.bias",
    f"{_A}.attention.key.weight": "encoder.layers.{}.{}.attn.k.weight",
    f"{_A}.attention.key.bias": "encoder.layers.{}.{}.attn.k.bias",
    f"{_A}.attention.value.weight": "encoder.layers.{}.{}.attn.v.weight",
    f"{_A}.attention.value.bias": "encoder.layers.{}.{}.attn.v.bias",
    f"{_A}.attention.dense.weight": "encoder.layers.{}.{}.attn.out.weight",
    f"{_A}.attention.dense.bias": "encoder.layers.{}.{}.attn.out.bias",
    f"{_A}.attention.LayerNorm.weight": "encoder.layers.{}.{}.attn_norm.weight",
    f"{_A}.attention.LayerNorm.bias": "encoder.layers.{}.{}.attn_norm.bias",
    f"{_A}.ffn.weight": "encoder.layers.{}.{}.ffn.up.weight",
    f"{_A}.ffn.bias": "encoder.layers.{}.{}.ffn.up.bias",
    f"{_A}.ffn_output.weight": "encoder.layers.{}.{}.ffn.down.weight",
    f"{_A}.ffn_output.bias": "encoder.layers.{}.{}.ffn.down.bias",
    f"{_A}.full_layer_layer_norm.weight": "encoder.layers.{}.{}.ffn_norm.weight",
    f"{_A}.full_layer_layer_norm.bias": "encoder.layers.{}.{}.ffn_norm.bias",
    "albert.pooler.weight": "encoder.pooler.dense.weight",  # a bare Linear in ALBERT
    "albert.pooler.bias": "encoder.pooler.dense.bias",
    "predictions.dense.weight": "head.mlm.dense.weight",
    "predictions.dense.bias": "head.mlm.dense.bias",
    "predictions.LayerNorm.weight": "head.mlm.norm.weight",
    "predictions.LayerNorm.bias": "head.mlm.norm.bias",
    "predictions.bias": "head.mlm.bias",
    "predictions.decoder.weight": None,  # tied to the word embeddings
    "predictions.decoder.bias": None,    # the same tensor as predictions.bias
    # the sentence-order head (AlbertForPreTraining): no task serves it
    "sop_classifier.classifier.weight": None,
    "sop_classifier.classifier.bias": None,
    **_TOKEN_AND_SPAN,
}

_M = "mpnet.encoder.layer.{}"
MPNET: dict[str, str | None] = {
    "mpnet.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "mpnet.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "mpnet.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "mpnet.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "mpnet.embeddings.position_ids": None,  # a buffer (arange), recomputed in forward
    f"{_M}.attention.attn.q.weight": "encoder.layers.{}.attn.q.weight",
    f"{_M}.attention.attn.q.bias": "encoder.layers.{}.attn.q.bias",
    f"{_M}.attention.attn.k.weight": "encoder.layers.{}.attn.k.weight",
    f"{_M}.attention.attn.k.bias": "encoder.layers.{}.attn.k.bias",
    f"{_M}.attention.attn.v.weight": "encoder.layers.{}.attn.v.weight",
    f"{_M}.attention.attn.v.bias": "encoder.layers.{}.attn.v.bias",
    f"{_M}.attention.attn.o.weight": "encoder.layers.{}.attn.out.weight",
    f"{_M}.attention.attn.o.bias": "encoder.layers.{}.attn.out.bias",
    f"{_M}.attention.LayerNorm.weight": "encoder.layers.{}.attn_norm.weight",
    f"{_M}.attention.LayerNorm.bias": "encoder.layers.{}.attn_norm.bias",
    f"{_M}.intermediate.dense.weight": "encoder.layers.{}.ffn.up.weight",
    f"{_M}.intermediate.dense.bias": "encoder.layers.{}.ffn.up.bias",
    f"{_M}.output.dense.weight": "encoder.layers.{}.ffn.down.weight",
    f"{_M}.output.dense.bias": "encoder.layers.{}.ffn.down.bias",
    f"{_M}.output.LayerNorm.weight": "encoder.layers.{}.ffn_norm.weight",
    f"{_M}.output.LayerNorm.bias": "encoder.layers.{}.ffn_norm.bias",
    # the one relative-position bias table, shared by every layer (build/mpnet.py)
    "mpnet.encoder.relative_attention_bias.weight": "encoder.relative.table.weight",
    "mpnet.pooler.dense.weight": "encoder.pooler.dense.weight",
    "mpnet.pooler.dense.bias": "encoder.pooler.dense.bias",
    # MPNetLMHead
    "lm_head.dense.weight": "head.mlm.dense.weight",
    "lm_head.dense.bias": "head.mlm.dense.bias",
    "lm_head.layer_norm.weight": "head.mlm.norm.weight",
    "lm_head.layer_norm.bias": "head.mlm.norm.bias",
    "lm_head.bias": "head.mlm.bias",
    "lm_head.decoder.weight": None,  # tied to the word embeddings
    "lm_head.decoder.bias": None,    # the same tensor as lm_head.bias
    # MPNetClassificationHead (RoBERTa's); token classification keeps the bare `classifier.*`
    "classifier.dense.weight": "head.dense.weight",
    "classifier.dense.bias": "head.dense.bias",
    "classifier.out_proj.weight": "head.out_proj.weight",
    "classifier.out_proj.bias": "head.out_proj.bias",
    **_TOKEN_AND_SPAN,
}

_DL = "deberta.encoder.layer.{}"
# DeBERTa-v2/v3 with its MLM head as DebertaV2ForMaskedLM writes it when config.legacy is false
# (lm_predictions); DEBERTA_LEGACY below when true (cls.predictions, transformers' default).
DEBERTA: dict[str, str | None] = {
    "deberta.embeddings.word_embeddings.weight": "encoder.embeddings.word.weight",
    "deberta.embeddings.position_embeddings.weight": "encoder.embeddings.position.weight",
    "deberta.embeddings.token_type_embeddings.weight": "encoder.embeddings.token_type.weight",
    "deberta.embeddings.embed_proj.weight": "encoder.embeddings.project.weight",
    "deberta.embeddings.LayerNorm.weight": "encoder.embeddings.norm.weight",
    "deberta.embeddings.LayerNorm.bias": "encoder.embeddings.norm.bias",
    "deberta.embeddings.position_ids": None,  # a buffer (arange)
    f"{_DL}.attention.self.query_proj.weight": "encoder.layers.{}.attn.q.weight",
    f"{_DL}.attention.self.query_proj.bias": "encoder.layers.{}.attn.q.bias",
    f"{_DL}.attention.self.key_proj.weight": "encoder.layers.{}.attn.k.weight",
    f"{_DL}.attention.self.key_proj.bias": "encoder.layers.{}.attn.k.bias",
    f"{_DL}.attention.self.value_proj.weight": "encoder.layers.{}.attn.v.weight",
    f"{_DL}.attention.self.value_proj.bias": "encoder.layers.{}.attn.v.bias",
    # the relative positions' own projections (share_att_key false)
    f"{_DL}.attention.self.pos_key_proj.weight": "encoder.layers.{}.attn.pos_k.weight",
    f"{_DL}.attention.self.pos_key_proj.bias": "encoder.layers.{}.attn.pos_k.bias",
    f"{_DL}.attention.self.pos_query_proj.weight": "encoder.layers.{}.attn.pos_q.weight",
    f"{_DL}.attention.self.pos_query_proj.bias": "encoder.layers.{}.attn.pos_q.bias",
    f"{_DL}.attention.output.dense.weight": "encoder.layers.{}.attn.out.weight",
    f"{_DL}.attention.output.dense.bias": "encoder.layers.{}.attn.out.bias",
    f"{_DL}.attention.output.LayerNorm.weight": "encoder.layers.{}.attn_norm.weight",
    f"{_DL}.attention.output.LayerNorm.bias": "encoder.layers.{}.attn_norm.bias",
    f"{_DL}.intermediate.dense.weight": "encoder.layers.{}.ffn.up.weight",
    f"{_DL}.intermediate.dense.bias": "encoder.layers.{}.ffn.up.bias",
    f"{_DL}.output.dense.weight": "encoder.layers.{}.ffn.down.weight",
    f"{_DL}.output.dense.bias": "encoder.layers.{}.ffn.down.bias",
    f"{_DL}.output.LayerNorm.weight": "encoder.layers.{}.ffn_norm.weight",
    f"{_DL}.output.LayerNorm.bias": "encoder.layers.{}.ffn_norm.bias",
    # the relative embeddings, shared by every layer, and their LayerNorm (build/deberta.py)
    "deberta.encoder.rel_embeddings.weight": "encoder.rel_positions.embeddings.weight",
    "deberta.encoder.LayerNorm.weight": "encoder.rel_positions.norm.weight",
    "deberta.encoder.LayerNorm.bias": "encoder.rel_positions.norm.bias",
    # the sequence classifier's ContextPooler, outside the base model
    "pooler.dense.weight": "encoder.pooler.dense.weight",
    "pooler.dense.bias": "encoder.pooler.dense.bias",
    "lm_predictions.lm_head.dense.weight": "head.mlm.dense.weight",
    "lm_predictions.lm_head.dense.bias": "head.mlm.dense.bias",
    "lm_predictions.lm_head.LayerNorm.weight": "head.mlm.norm.weight",
    "lm_predictions.lm_head.LayerNorm.bias": "head.mlm.norm.bias",
    "lm_predictions.lm_head.bias": "head.mlm.bias",
    # the other naming's MLM head, which transformers does not read either (and warns about)
    **dict.fromkeys(("cls.predictions.transform.dense.weight",
                     "cls.predictions.transform.dense.bias",
                     "cls.predictions.transform.LayerNorm.weight",
                     "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias",
                     "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")),
    # the replaced-token detector of DeBERTa-v3's pretraining (ELECTRA's): no task serves it
    **dict.fromkeys(("mask_predictions.dense.weight", "mask_predictions.dense.bias",
                     "mask_predictions.LayerNorm.weight", "mask_predictions.LayerNorm.bias",
                     "mask_predictions.classifier.weight", "mask_predictions.classifier.bias")),
    **_TOKEN_AND_SPAN,
}
_MLM_NEW = [k for k in DEBERTA if k.startswith("lm_predictions.")]
_MLM_LEGACY = [k for k in DEBERTA if k.startswith("cls.predictions.")]
DEBERTA_LEGACY: dict[str, str | None] = {
    **{k: v for k, v in DEBERTA.items() if k not in _MLM_NEW},
    **dict.fromkeys(_MLM_NEW),
    "cls.predictions.transform.dense.weight": "head.mlm.dense.weight",
    "cls.predictions.transform.dense.bias": "head.mlm.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head.mlm.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head.mlm.norm.bias",
    "cls.predictions.bias": "head.mlm.bias",  # decoder.weight: tied; decoder.bias: this one
}

_INDEX = re.compile(r"\.(\d+)(?=\.)")
# TF-converted checkpoints name LayerNorm gamma/beta.
_TF_NAMES = ((".gamma", ".weight"), (".beta", ".bias"))


def template(key: str) -> tuple[str, tuple[str, ...]]:
    """'a.3.b.0.c' -> ('a.{}.b.{}.c', ('3', '0')); keys without an index give (key, ())."""
    return _INDEX.sub(".{}", key), tuple(_INDEX.findall(key))


@dataclass(frozen=True)
class KeyTable:
    """One family's table and its inverse. `prefix` is the base model's attribute (`bert`,
    `roberta`, ...): bare base-model checkpoints (BertModel, ...) carry their keys without it."""

    prefix: str
    hf_to_ours_map: dict[str, str | None]
    ours_to_hf_map: dict[str, str] = field(init=False)
    roots: tuple[str, ...] = field(init=False)  # first names of the base model's keys

    def __post_init__(self):
        inverse = {v: k for k, v in self.hf_to_ours_map.items() if v is not None}
        object.__setattr__(self, "ours_to_hf_map", inverse)
        roots = {k.split(".")[1] + "." for k in self.hf_to_ours_map
                 if k.startswith(self.prefix + ".")}
        object.__setattr__(self, "roots", tuple(sorted(roots)))

    def normalize(self, key: str) -> str:
        if key.startswith(self.roots):
            key = f"{self.prefix}.{key}"
        for old, new in _TF_NAMES:
            if key.endswith(old) and "LayerNorm" in key:
                key = key[: -len(old)] + new
        return key

    def to_ours(self, key: str) -> str | None:
        """Ours for an HF key; None if the key is dropped; KeyError if the table does not know
        it."""
        tmpl, idx = template(self.normalize(key))
        ours = self.hf_to_ours_map[tmpl]
        return None if ours is None else ours.format(*idx)

    def to_hf(self, key: str, *, bare: bool = False) -> str:
        """The HF key of one of ours; `bare` drops the base-model prefix (BertModel & co)."""
        tmpl, idx = template(key)
        hf = self.ours_to_hf_map[tmpl].format(*idx)
        return hf.removeprefix(self.prefix + ".") if bare else hf


# key map name (the base model's attribute, XLM-R's and CamemBERT's too: roberta) -> table
KEY_TABLES = MappingProxyType({t.prefix: t for t in (
    KeyTable("bert", BERT), KeyTable("roberta", ROBERTA), KeyTable("distilbert", DISTILBERT),
    KeyTable("electra", ELECTRA), KeyTable("albert", ALBERT), KeyTable("mpnet", MPNET),
    KeyTable("deberta", DEBERTA), KeyTable("model", MODERNBERT))})
# DeBERTa's config.legacy names its MLM head the other way (LegacyDebertaV2OnlyMLMHead)
LEGACY_KEY_TABLES = MappingProxyType({"deberta": KeyTable("deberta", DEBERTA_LEGACY)})


def key_table(model_type: str, *, legacy: bool = False) -> KeyTable:
    """The table of a config.json model_type, by its family row's `key_map`; `legacy`
    (BertConfig.legacy, DeBERTa's): the table under the MLM head's legacy names."""
    name = family(model_type).key_map
    return LEGACY_KEY_TABLES[name] if legacy else KEY_TABLES[name]


# BERT's table under its historical names (tests and scripts read these).
HF_TO_OURS = BERT
OURS_TO_HF = KEY_TABLES["bert"].ours_to_hf_map


def hf_to_ours(key: str, model_type: str = DEFAULT_MODEL_TYPE) -> str | None:
    return key_table(model_type).to_ours(key)


def ours_to_hf(key: str, model_type: str = DEFAULT_MODEL_TYPE) -> str:
    return key_table(model_type).to_hf(key)
