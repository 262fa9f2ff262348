"""The BERT family as one table: each model_type is a row of switches on the one encoder.

RoBERTa (and XLM-R, CamemBERT): position ids count non-padding tokens from pad_token_id + 1, one
token type, no pooler outside RobertaModel, a dense->tanh classifier on <s>. DistilBERT: no token
types, no pooler, 1e-12 LayerNorms, pre_classifier->ReLU. ELECTRA: embeddings narrower than the
encoder with a projection, no pooler, dense->GELU classifier, a GELU generator MLM head. ALBERT:
factorized embeddings (always projected) and groups of layers reused across depth. Sources:
transformers 4.57's modeling_* and configuration_* of each family.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from bertonnx.runtime.contract import HF_CLASS_PREFIXES

from .keys import KEY_TABLES, KeyTable

_EMPTY: Mapping = MappingProxyType({})
_FLAT = MappingProxyType({"num_hidden_groups": 1, "inner_group_num": 1})  # no layer sharing
_PLAIN = MappingProxyType({**_FLAT, "embedding_size": None})  # and embeddings as wide as layers


@dataclass(frozen=True)
class Family:
    model_type: str                   # config.json's model_type
    name: str                         # for messages: "RoBERTa"
    positions_from_padding: bool = False  # RoBERTa: position = pad_token_id + rank among non-pads
    token_types: bool = True          # DistilBERT has no segment embedding
    projection: str = "never"         # embeddings -> hidden: "never", "if-narrower", "always"
    shared_layers: bool = False       # ALBERT: layer groups reused across depth
    pooler_tasks: frozenset = frozenset({"feature-extraction"})  # HF classes with a pooler
    classifier: str = "pooled"        # sequence head (heads.SEQUENCE_HEADS): pooled, dense,
    classifier_act: str = "tanh"      # pre_classifier; and its activation
    mlm_act: str | None = None        # the MLM head's activation, when fixed (else hidden_act)
    # config.json names where they differ from BertConfig's: {HF name: our field}
    config_names: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # our fields the family's config.json lacks, at the only value the family has
    fixed: Mapping[str, Any] = field(default_factory=lambda: _PLAIN)
    # transformers' defaults for fields a config.json leaves out, where they differ from ours
    defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # constants written to config.json (the only value bertonnx implements)
    hf_constants: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({"position_embedding_type": "absolute"}))

    @property
    def keys(self) -> KeyTable:
        return KEY_TABLES[self.model_type]

    @property
    def class_prefix(self) -> str:
        """transformers' class-name prefix (Roberta, XLMRoberta, ...)."""
        return HF_CLASS_PREFIXES[self.model_type]


def _roberta(model_type: str, name: str) -> Family:
    return Family(model_type, name, positions_from_padding=True, pooler_tasks=frozenset(
        {"feature-extraction"}), classifier="dense", classifier_act="tanh", mlm_act="gelu",
        defaults=MappingProxyType({"pad_token_id": 1}))


FAMILIES: Mapping[str, Family] = MappingProxyType({f.model_type: f for f in (
    Family("bert", "BERT", pooler_tasks=frozenset({"feature-extraction", "text-classification",
                                           "pretraining"})),
    _roberta("roberta", "RoBERTa"), _roberta("xlm-roberta", "XLM-RoBERTa"),
    _roberta("camembert", "CamemBERT"),
    Family("distilbert", "DistilBERT", token_types=False, pooler_tasks=frozenset(),
           classifier="pre_classifier", classifier_act="relu",
           config_names=MappingProxyType({
               "dim": "hidden_size", "n_layers": "num_hidden_layers",
               "n_heads": "num_attention_heads", "hidden_dim": "intermediate_size",
               "activation": "hidden_act", "dropout": "hidden_dropout_prob",
               "attention_dropout": "attention_probs_dropout_prob",
               "seq_classif_dropout": "classifier_dropout"}),
           # LayerNorm eps is hard-coded to 1e-12 in modeling_distilbert
           fixed=MappingProxyType({**_PLAIN, "type_vocab_size": 0, "layer_norm_eps": 1e-12}),
           defaults=MappingProxyType({"classifier_dropout": 0.2}),
           hf_constants=MappingProxyType({"sinusoidal_pos_embds": False})),
    Family("electra", "ELECTRA", projection="if-narrower", pooler_tasks=frozenset(),
           classifier="dense", classifier_act="gelu", mlm_act="gelu", fixed=_FLAT,
           defaults=MappingProxyType({"embedding_size": 128})),
    Family("albert", "ALBERT", projection="always", shared_layers=True,
           pooler_tasks=frozenset({"feature-extraction", "text-classification"}),
           config_names=MappingProxyType({"classifier_dropout_prob": "classifier_dropout"}),
           fixed=_EMPTY,
           defaults=MappingProxyType({"embedding_size": 128, "hidden_act": "gelu_new",
                                      "hidden_dropout_prob": 0.0,
                                      "attention_probs_dropout_prob": 0.0,
                                      "classifier_dropout": 0.1})),
)})
