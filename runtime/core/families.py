"""The BERT family as one table: each model_type is one row, read by the loader and saver
(build/config.py, checkpoint.py, save.py, keys.py), the model and its heads, the export (fusion),
the tokenizer loader (tokenizer_families.py) and the runtime (usable_positions).

RoBERTa (and XLM-R, CamemBERT): position ids count non-padding tokens from pad_token_id + 1, one
token type, no pooler outside RobertaModel, a dense->tanh classifier on <s>. DistilBERT: no token
types, no pooler, 1e-12 LayerNorms, pre_classifier->ReLU. ELECTRA: embeddings narrower than the
encoder with a projection, no pooler, dense->GELU classifier, a GELU generator MLM head. ALBERT:
factorized embeddings (always projected) and groups of layers reused across depth. MPNet:
RoBERTa's positions (counted past a fixed padding id 1, whatever pad_token_id says), no token
types, and a learned relative-position bias (T5's bidirectional buckets) computed once and added
to every layer's attention scores. DeBERTa-v2/v3:
disentangled attention (content-to-position and position-to-content scores over log-bucketed
relative distances), no absolute positions or token types in v3, a ContextPooler. Sources:
transformers 4.57's modeling_* and configuration_* of each family, and
models/auto/tokenization_auto.py (TOKENIZER_MAPPING_NAMES) for the tokenizer classes.

Torch-free: what only torch needs is named here and resolved in build — the key table by
`key_map` (build/keys.py), the activations by name (build/model.py's `activation`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from .errors import ConfigError

_EMPTY: Mapping = MappingProxyType({})
_FLAT = MappingProxyType({"num_hidden_groups": 1, "inner_group_num": 1})  # no layer sharing
_PLAIN = MappingProxyType({**_FLAT, "embedding_size": None})  # and embeddings as wide as layers

# The family a config.json without a model_type is read as.
DEFAULT_MODEL_TYPE = "bert"


@dataclass(frozen=True)
class Family:
    model_type: str                   # config.json's model_type
    name: str                         # for messages: "RoBERTa"
    class_prefix: str                 # transformers' classes: RobertaModel, RobertaForMaskedLM
    tokenizer: str                    # AutoTokenizer's class for the model_type, less "Fast"
                                      # (a row of tokenizer_families.py, with its special tokens)
    key_map: str                      # build/keys.py's KEY_TABLES row: the base model's
                                      # attribute in transformers' classes (XLM-R's: roberta)
    positions_from_padding: bool = False  # RoBERTa: position = pad_token_id + rank among non-pads
    # the id the embeddings treat as padding where transformers fixes it whatever
    # config.pad_token_id says (MPNetEmbeddings.padding_idx = 1); None: pad_token_id
    padding_idx: int | None = None
    token_types: bool = True          # DistilBERT has no segment embedding
    projection: str = "never"         # embeddings -> hidden: "never", "if-narrower", "always"
    shared_layers: bool = False       # ALBERT: layer groups reused across depth
    pooler_tasks: frozenset = frozenset({"feature-extraction"})  # HF classes with a pooler
    classifier: str = "pooled"        # sequence head (build/heads.py SEQUENCE_HEADS): pooled,
    classifier_act: str = "tanh"      # dense, pre_classifier; and its activation
    mlm_act: str | None = None        # the MLM head's activation, when fixed (else hidden_act)
    # the task a <class_prefix>ForPreTraining checkpoint serves: its MLM half (the NSP / sentence
    # order head dropped), or ELECTRA's discriminator, whose encoder serves feature extraction
    pretraining_serves: str | None = None
    builds_pretraining: bool = False  # bertonnx's own "pretraining" task (MLM + NSP heads)
    # MPNet: a learned bias per (head, bucketed relative distance), added to every layer's
    # attention scores (build/mpnet.py)
    relative_bias: bool = False
    # BertConfig fields only this family's config.json has (build/config.py marks them
    # family-only; the other families neither read nor write them)
    own_fields: frozenset = frozenset()
    # "disentangled": DeBERTa's attention, with its own embeddings and relative positions
    # (build/deberta.py); "sdpa": BERT's scaled dot-product attention
    attention: str = "sdpa"
    # onnxruntime's optimizer makes one Attention per layer and one EmbedLayerNormalization
    # (export/fusion.py checks it); False where it has no pattern for the family's attention
    fully_fused: bool = True
    # ModernBERT (build/modernbert.py): "pre"-LN layers with a final norm (else BERT's post-LN);
    # a gated feed-forward ("geglu", else BERT's "mlp"); its own heads on a dense -> act -> norm
    # prediction head ("prediction", else build/heads.py's "bert" ones). Its `attention`
    # "rotary" has no position table: rotary queries and keys, global and windowed layers.
    norm: str = "post"
    ffn: str = "mlp"
    heads: str = "bert"
    ort_model_type: str = "bert"      # onnxruntime transformer optimizer's model_type (fusion)
    # config.json names where they differ from BertConfig's: {HF name: our field}
    config_names: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # our fields the family's config.json lacks, at the only value the family has
    fixed: Mapping[str, Any] = field(default_factory=lambda: _PLAIN)
    # transformers' defaults for fields a config.json leaves out, where they differ from ours
    defaults: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # constants written to config.json (the only value bertonnx implements)
    hf_constants: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({"position_embedding_type": "absolute"}))

    def padding_id(self, pad_token_id: int) -> int:
        """The id whose tokens the embeddings treat as padding (keep the padding position, a
        word row never trained): the family's fixed one, else config.pad_token_id."""
        return pad_token_id if self.padding_idx is None else self.padding_idx

    def position_offset(self, pad_token_id: int) -> int:
        """The first position id: RoBERTa numbers from pad_token_id + 1 (fairseq's
        make_positions), MPNet from 2 whatever pad_token_id is, the others from 0."""
        return self.padding_id(pad_token_id) + 1 if self.positions_from_padding else 0


def _roberta(model_type: str, name: str, class_prefix: str) -> Family:
    return Family(model_type, name, class_prefix, f"{class_prefix}Tokenizer", "roberta",
                  positions_from_padding=True, classifier="dense", classifier_act="tanh",
                  mlm_act="gelu", defaults=MappingProxyType({"pad_token_id": 1}))


FAMILIES: Mapping[str, Family] = MappingProxyType({f.model_type: f for f in (
    Family("bert", "BERT", "Bert", "BertTokenizer", "bert",
           pooler_tasks=frozenset({"feature-extraction", "text-classification", "pretraining"}),
           pretraining_serves="fill-mask", builds_pretraining=True),
    _roberta("roberta", "RoBERTa", "Roberta"),
    _roberta("xlm-roberta", "XLM-RoBERTa", "XLMRoberta"),
    _roberta("camembert", "CamemBERT", "Camembert"),
    Family("distilbert", "DistilBERT", "DistilBert", "DistilBertTokenizer", "distilbert",
           token_types=False, pooler_tasks=frozenset(), classifier="pre_classifier",
           classifier_act="relu",
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
    Family("electra", "ELECTRA", "Electra", "ElectraTokenizer", "electra",
           projection="if-narrower", pooler_tasks=frozenset(), classifier="dense",
           classifier_act="gelu", mlm_act="gelu", pretraining_serves="feature-extraction",
           fixed=_FLAT, defaults=MappingProxyType({"embedding_size": 128})),
    Family("albert", "ALBERT", "Albert", "AlbertTokenizer", "albert",
           projection="always", shared_layers=True,
           pooler_tasks=frozenset({"feature-extraction", "text-classification"}),
           pretraining_serves="fill-mask",
           config_names=MappingProxyType({"classifier_dropout_prob": "classifier_dropout"}),
           fixed=_EMPTY,
           defaults=MappingProxyType({"embedding_size": 128, "hidden_act": "gelu_new",
                                      "hidden_dropout_prob": 0.0,
                                      "attention_probs_dropout_prob": 0.0,
                                      "classifier_dropout": 0.1})),
    # MPNet: RoBERTa's positions (counted past a fixed padding id 1, not pad_token_id) and
    # classifier, no token types, and a relative-position bias table
    # (relative_attention_num_buckets rows) shared by every layer
    Family("mpnet", "MPNet", "MPNet", "MPNetTokenizer", "mpnet", positions_from_padding=True,
           padding_idx=1,
           token_types=False, classifier="dense", classifier_act="tanh", mlm_act="gelu",
           relative_bias=True, own_fields=frozenset({"relative_attention_num_buckets"}),
           # its classifier's dropout is hidden_dropout_prob: no classifier_dropout field
           fixed=MappingProxyType({**_PLAIN, "type_vocab_size": 0, "classifier_dropout": None}),
           defaults=MappingProxyType({"pad_token_id": 1, "vocab_size": 30527}),
           hf_constants=_EMPTY),
    # DeBERTa-v2/v3: disentangled attention over log-bucketed relative positions (v3: no
    # absolute positions, no token types), BERT's MLM head under one of two names (`legacy`),
    # and the sequence classifier's ContextPooler (dense -> pooler_hidden_act) as the pooler
    Family("deberta-v2", "DeBERTa-v2", "DebertaV2", "DebertaV2Tokenizer", "deberta",
           projection="if-narrower", pooler_tasks=frozenset({"text-classification"}),
           attention="disentangled", fully_fused=False,
           own_fields=frozenset({"relative_attention", "max_relative_positions",
                                 "position_buckets", "pos_att_type", "share_att_key",
                                 "norm_rel_ebd", "position_biased_input", "pooler_hidden_act",
                                 "legacy"}),
           # its classifier drops out by cls_dropout, a training-only setting not read here
           fixed=MappingProxyType({**_FLAT, "classifier_dropout": None}),
           defaults=MappingProxyType({"vocab_size": 128100, "hidden_size": 1536,
                                      "num_hidden_layers": 24, "num_attention_heads": 24,
                                      "intermediate_size": 6144, "type_vocab_size": 0,
                                      "layer_norm_eps": 1e-7, "pooler_hidden_act": "gelu",
                                      "legacy": True}),
           hf_constants=_EMPTY),
    # ModernBERT: pre-LN layers without biases, rotary attention (global every n-th layer, a
    # sliding window in the others), a GeGLU feed-forward, no position table or token types,
    # and its own heads on a dense -> act -> norm prediction head (build/modernbert.py)
    Family("modernbert", "ModernBERT", "ModernBert", "PreTrainedTokenizer", "model",
           token_types=False, pooler_tasks=frozenset(), attention="rotary", fully_fused=False,
           norm="pre", ffn="geglu", heads="prediction",
           own_fields=frozenset({"global_rope_theta", "local_rope_theta",
                                 "global_attn_every_n_layers", "local_attention",
                                 "classifier_pooling", "classifier_activation",
                                 "attention_bias", "mlp_bias", "norm_bias", "classifier_bias",
                                 "decoder_bias"}),
           config_names=MappingProxyType({
               "hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps",
               "attention_dropout": "attention_probs_dropout_prob",
               "mlp_dropout": "hidden_dropout_prob"}),
           fixed=MappingProxyType({**_PLAIN, "type_vocab_size": 0}),
           defaults=MappingProxyType({
               "vocab_size": 50368, "intermediate_size": 1152, "num_hidden_layers": 22,
               "max_position_embeddings": 8192, "layer_norm_eps": 1e-5, "pad_token_id": 50283,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               "classifier_dropout": 0.0, "attention_bias": False, "mlp_bias": False,
               "norm_bias": False, "classifier_bias": False}),
           hf_constants=_EMPTY),
)})


def family(model_type: str = DEFAULT_MODEL_TYPE) -> Family:
    """The row of a config.json model_type; ConfigError naming the supported ones."""
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ConfigError(f"model_type {model_type!r} is not supported",
                          f"bertonnx loads {', '.join(FAMILIES)} checkpoints") from None


def ort_model_type(model_type: str | None) -> str:
    """onnxruntime's optimizer model_type for a graph of `model_type`: the row's; a graph of a
    family bertonnx does not load (adopted from elsewhere) is tried with BERT's patterns."""
    row = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    return (row or FAMILIES[DEFAULT_MODEL_TYPE]).ort_model_type


def config_spellings(field_name: str) -> tuple[str, ...]:
    """Every config.json name of one of our fields: ours first, then the families' own
    (num_attention_heads -> num_attention_heads, n_heads)."""
    own = (hf for f in FAMILIES.values() for hf, ours in f.config_names.items()
           if ours == field_name)
    return tuple(dict.fromkeys((field_name, *own)))


def usable_positions(config: dict) -> int | None:
    """How many tokens a sequence of the model may hold, from its config.json: the position
    table's size, less the padding offset where the family has one (514 -> 512)."""
    n = config.get("max_position_embeddings")
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    model_type = config.get("model_type")
    row = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if row is not None and row.positions_from_padding:
        pad = config.get("pad_token_id")
        n -= row.position_offset(pad if isinstance(pad, int) else row.defaults["pad_token_id"])
    return n
