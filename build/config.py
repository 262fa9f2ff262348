"""`BertConfig`: the one description of a BERT-family model's shape, read from and written to HF
config.json.

Reference: transformers' `BertConfig` (same field names, so `from_hf`/`to_hf` are near identity
for BERT); the other families (`model_type`) rename a few fields and fix others, as their row in
runtime/core/families.py says.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bertonnx.runtime.core.errors import ArtifactError, ConfigError
from bertonnx.runtime.core.families import DEFAULT_MODEL_TYPE, Family, family as family_of
from bertonnx.runtime.core.files import read_json_object

ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu", "swish")
PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")
# A field only some families have (their row's `own_fields`): the others neither read it from
# config.json nor write it there, and keep it at its default.
FAMILY_ONLY = MappingProxyType({"family_only": True})


@dataclass(frozen=True)
class BertConfig:
    model_type: str = DEFAULT_MODEL_TYPE  # the family (its row): which switches the encoder turns
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    embedding_size: int | None = None  # ALBERT, ELECTRA: narrower embeddings, projected
    num_hidden_groups: int = 1  # ALBERT: distinct layer groups shared across the depth
    inner_group_num: int = 1    # ALBERT: layers in each group
    # MPNet: rows of the relative-position bias table
    relative_attention_num_buckets: int = field(default=32, metadata=FAMILY_ONLY)
    # DeBERTa-v2/v3 (build/deberta.py): disentangled attention over bucketed relative positions
    relative_attention: bool = field(default=False, metadata=FAMILY_ONLY)
    max_relative_positions: int = field(default=-1, metadata=FAMILY_ONLY)  # < 1: the table's
    position_buckets: int = field(default=-1, metadata=FAMILY_ONLY)  # < 1: no log buckets
    pos_att_type: tuple[str, ...] = field(default=(), metadata=FAMILY_ONLY)  # "c2p", "p2c"
    share_att_key: bool = field(default=False, metadata=FAMILY_ONLY)  # q/k project positions
    norm_rel_ebd: str = field(default="none", metadata=FAMILY_ONLY)  # "layer_norm": v3's
    position_biased_input: bool = field(default=True, metadata=FAMILY_ONLY)  # absolute positions
    pooler_hidden_act: str = field(default="tanh", metadata=FAMILY_ONLY)  # BERT's pooler: tanh
    legacy: bool = field(default=False, metadata=FAMILY_ONLY)  # MLM head as cls.predictions.*
    # ModernBERT (build/modernbert.py): rotary bases, a global layer every n (the others attend
    # within +-local_attention // 2), its heads' pooling and activation
    global_rope_theta: float = field(default=160000.0, metadata=FAMILY_ONLY)
    local_rope_theta: float = field(default=10000.0, metadata=FAMILY_ONLY)
    global_attn_every_n_layers: int = field(default=3, metadata=FAMILY_ONLY)
    local_attention: int = field(default=128, metadata=FAMILY_ONLY)
    classifier_pooling: str = field(default="cls", metadata=FAMILY_ONLY)  # "cls" | "mean"
    classifier_activation: str = field(default="gelu", metadata=FAMILY_ONLY)
    # Which layers carry a bias: all of them but in ModernBERT, whose config turns them off
    # (its row's defaults)
    attention_bias: bool = field(default=True, metadata=FAMILY_ONLY)
    mlp_bias: bool = field(default=True, metadata=FAMILY_ONLY)
    norm_bias: bool = field(default=True, metadata=FAMILY_ONLY)
    classifier_bias: bool = field(default=True, metadata=FAMILY_ONLY)
    decoder_bias: bool = field(default=True, metadata=FAMILY_ONLY)
    classifier_dropout: float | None = None
    problem_type: str | None = None
    # id2label keys are ints here; HF writes them as strings in JSON.
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    head_dim: int = field(init=False)

    def __post_init__(self):
        family = family_of(self.model_type)
        for name, value in family.fixed.items():
            if getattr(self, name) != value:
                raise ConfigError(f"{name}={getattr(self, name)!r} does not fit model_type "
                                  f"{self.model_type!r}",
                                  f"{self.model_type} has {name}={value!r}")
        for f in _foreign_fields(family):
            if getattr(self, f.name) != f.default:
                raise ConfigError(f"{f.name}={getattr(self, f.name)!r} does not fit model_type "
                                  f"{self.model_type!r}", f"{self.model_type} has no {f.name}")
        if not 1 <= self.num_hidden_groups <= self.num_hidden_layers or self.inner_group_num < 1:
            raise ConfigError(f"num_hidden_groups {self.num_hidden_groups} / inner_group_num "
                              f"{self.inner_group_num} do not fit {self.num_hidden_layers} layers",
                              "use 1 <= num_hidden_groups <= num_hidden_layers")
        if self.max_tokens < 1:
            raise ConfigError(f"max_position_embeddings {self.max_position_embeddings} leaves no "
                              f"position after the offset {self.position_offset}",
                              "raise max_position_embeddings")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}", "choose a head count that divides hidden_size")
        if self.hidden_act not in ACTIVATIONS:
            raise ConfigError(f"unsupported hidden_act {self.hidden_act!r}",
                              f"use one of {', '.join(ACTIVATIONS)}")
        if self.classifier_activation not in ACTIVATIONS:
            raise ConfigError(f"unsupported classifier_activation {self.classifier_activation!r}",
                              f"use one of {', '.join(ACTIVATIONS)}")
        if self.classifier_pooling not in ("cls", "mean"):
            raise ConfigError(f"unknown classifier_pooling {self.classifier_pooling!r}",
                              "use cls or mean")
        if self.global_attn_every_n_layers < 1 or self.local_attention < 0:
            raise ConfigError(f"global_attn_every_n_layers {self.global_attn_every_n_layers} / "
                              f"local_attention {self.local_attention} are out of range",
                              "use global_attn_every_n_layers >= 1 and local_attention >= 0")
        if self.pooler_hidden_act not in (*ACTIVATIONS, "tanh"):
            raise ConfigError(f"unsupported pooler_hidden_act {self.pooler_hidden_act!r}",
                              f"use one of {', '.join(ACTIVATIONS)}, tanh")
        # DeBERTa: transformers takes "p2c|c2p" as well as a list (or null)
        att = self.pos_att_type
        object.__setattr__(self, "pos_att_type", tuple(
            t.strip() for t in (att.lower().split("|") if isinstance(att, str) else att or ())))
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"unknown problem_type {self.problem_type!r}",
                              f"use one of {', '.join(PROBLEM_TYPES)}")
        object.__setattr__(self, "id2label", {int(k): str(v) for k, v in self.id2label.items()})
        if sorted(self.id2label) != list(range(len(self.id2label))):
            raise ConfigError("id2label ids must be 0..N-1", "renumber the labels")
        object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)

    @property
    def family(self) -> Family:
        return family_of(self.model_type)

    @property
    def embedding_dim(self) -> int:
        """Width of the embedding tables (and of the MLM head's decoder)."""
        return self.embedding_size or self.hidden_size

    @property
    def embedding_projection(self) -> bool:
        """Do the embeddings pass through a Linear(embedding_dim, hidden_size)?"""
        mode = self.family.projection
        narrower = self.embedding_dim != self.hidden_size
        return mode == "always" or (mode == "if-narrower" and narrower)

    @property
    def layer_schedule(self) -> tuple[int, ...]:
        """Which layer (ALBERT: layer group) runs at each depth: ALBERT's int(i / (N / G))."""
        n, g = self.num_hidden_layers, self.num_hidden_groups
        if not self.family.shared_layers:
            return tuple(range(n))
        return tuple(int(i / (n / g)) for i in range(n))

    @property
    def position_offset(self) -> int:
        """RoBERTa numbers positions from pad_token_id + 1 (fairseq's make_positions), MPNet
        from its fixed padding id 1 + 1."""
        return self.family.position_offset(self.pad_token_id)

    @property
    def max_tokens(self) -> int:
        """The longest sequence the position table covers."""
        return self.max_position_embeddings - self.position_offset

    @property
    def classifier_dropout_p(self) -> float:
        p = self.classifier_dropout
        return self.hidden_dropout_prob if p is None else p

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in self.id2label.items()}

    def replace(self, **changes: Any) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def with_labels(self, labels: list[str] | int) -> "BertConfig":
        names = [f"LABEL_{i}" for i in range(labels)] if isinstance(labels, int) else list(labels)
        return self.replace(id2label=dict(enumerate(names)))

    @classmethod
    def from_hf(cls, source: dict | str | Path) -> "BertConfig":
        """From a HF config dict, a config.json path, or a folder holding one."""
        if isinstance(source, dict):
            return cls._from_hf_dict(source)
        path = Path(source)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ArtifactError(f"no config.json at {path}",
                                "point at a folder saved by save_pretrained")
        source = read_json_object(path, "restore the file")
        try:
            return cls._from_hf_dict(source)
        except ConfigError as e:  # name the file: the user has to edit or replace it
            raise ConfigError(f"{path}: {e.problem}", e.fix) from e
        except (TypeError, ValueError, AttributeError) as e:  # a field of the wrong JSON type
            raise ConfigError(f"{path}: malformed field ({type(e).__name__}: {e})",
                              "fix the field in config.json") from e

    @classmethod
    def _from_hf_dict(cls, source: dict) -> "BertConfig":
        model_type = source.get("model_type", DEFAULT_MODEL_TYPE)
        family = family_of(model_type)
        pos = source.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise ConfigError(f"position_embedding_type {pos!r} is not supported",
                              "only 'absolute' position embeddings are implemented")
        names = {f.name for f in dataclasses.fields(cls) if f.init} - set(family.fixed) - {
            f.name for f in _foreign_fields(family)}
        read = {family.config_names.get(k, k): v for k, v in source.items()}
        kwargs = {**family.defaults, **{k: v for k, v in read.items() if k in names},
                  **family.fixed, "model_type": model_type}
        if "id2label" not in source and "num_labels" in source:
            kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(source["num_labels"]))}
        config = cls(**kwargs)
        _refuse_unimplemented(source, config)
        return config

    def to_hf(self) -> dict:
        family = self.family
        hf_name = {ours: hf for hf, ours in family.config_names.items()}
        skip = set(family.fixed) | {f.name for f in _foreign_fields(family)}
        d = {hf_name.get(f.name, f.name): getattr(self, f.name)
             for f in dataclasses.fields(self) if f.init and f.name not in skip}
        # DistilBERT's, ALBERT's and ModernBERT's heads need a number (transformers' default is
        # one), the others read None as hidden_dropout_prob
        if "classifier_dropout" in hf_name or "classifier_dropout" in family.defaults:
            d[hf_name.get("classifier_dropout", "classifier_dropout")] = self.classifier_dropout_p
        d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        d["label2id"] = self.label2id
        d.update(family.hf_constants)
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}  # JSON's lists
        if d.get("embedding_size", 0) is None:  # DeBERTa reads a null one as the width
            del d["embedding_size"]
        if d.get("legacy") is False:
            # DeBERTa's lm_predictions head: tied, transformers 4.57 would tie its dense layer
            # to the word embeddings (and fail); the decoder reads them untied anyway
            d["tie_word_embeddings"] = False
        return d


def _refuse_unimplemented(source: dict, c: BertConfig) -> None:
    """Options transformers reads that the scratch encoder does not implement, refused by name
    rather than loaded wrong: DeBERTa-v2's convolution beside the first layer (v2-xlarge and
    -xxlarge; no v3 model has one), heads of another width than hidden / heads, and a pooler
    of another width than the encoder (transformers' own classifier fails on it)."""
    if (source.get("conv_kernel_size") or 0) > 0:
        raise ConfigError(f"conv_kernel_size {source['conv_kernel_size']} (a convolution beside "
                          "the first layer) is not supported",
                          "use a checkpoint without it (every DeBERTa-v3 model has none)")
    for key, want in (("attention_head_size", c.head_dim), ("pooler_hidden_size", c.hidden_size)):
        if source.get(key, want) != want:
            raise ConfigError(f"{key} {source[key]} differs from {want}, the only value "
                              "bertonnx implements", f"use a checkpoint with {key} {want}")


def _foreign_fields(family: Family) -> tuple[dataclasses.Field, ...]:
    """The family-only fields (FAMILY_ONLY) `family` does not have."""
    return tuple(f for f in dataclasses.fields(BertConfig)
                 if f.metadata.get("family_only") and f.name not in family.own_fields)


# Presets: (layers, hidden, heads) as in Turc et al. 2019's compact BERTs, plus `tiny` for tests.
PRESETS: dict[str, BertConfig] = {
    "tiny": BertConfig(vocab_size=1024, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=128),
    "mini": BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                       intermediate_size=1024),
    "small": BertConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                        intermediate_size=2048),
    "base": BertConfig(),
    "large": BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096),
}


def preset(name: str) -> BertConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}",
                          f"use one of {', '.join(PRESETS)} or a config.json path") from None
