"""Task heads composed on the one encoder, and the task table that picks them.

Each head takes the encoder's (hidden (B, T, H), pooled (B, H) or None) and returns what
the task table promises (docs/build.md). Losses are pure functions in `losses.py`, not in forward.
A family's own heads (its row in runtime/core/families.py) are switches here too: the MLM head's
width and activation, and which sequence classifier (`SEQUENCE_HEADS`) sits on the encoder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.families import FAMILIES, family
from bertonnx.runtime.core.tasks import TASKS as RECORDS

from .config import BertConfig
from .model import Encoder, activation, init_weights
from .save import save_pretrained


class MLMHead(nn.Module):
    """dense -> act -> LayerNorm -> decoder tied to the word embeddings, + bias.

    Every family's: BERT's cls.predictions, RoBERTa's lm_head, DistilBERT's vocab_*, ALBERT's
    predictions and ELECTRA's generator head narrow to the embedding width E before decoding."""

    def __init__(self, c: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        E = c.embedding_dim
        self.dense = nn.Linear(c.hidden_size, E)
        self.act = activation(c.family.mlm_act or c.hidden_act)
        self.norm = nn.LayerNorm(E, eps=c.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.vocab_size = c.vocab_size  # a Python int, so the exported graph's V axis is fixed
        # A tuple hides the embedding from module registration: the weight is owned (and
        # saved) once, by the encoder, and only borrowed here.
        self._tied = (word_embeddings,)

    def forward(self, hidden, positions=None):
        if positions is not None:
            # training: decode only the masked positions (~15%), the vocabulary projection
            # being the largest matmul of a small BERT; (N, H) -> (N, V)
            h = self.norm(self.act(self.dense(hidden[positions])))
            return F.linear(h, self._tied[0].weight, self.bias)
        h = self.norm(self.act(self.dense(hidden)))
        B, T, H = h.shape
        # F.linear on a 2-D input exports as Gemm(transB=1) reading the embedding matrix
        # directly; on 3-D it would become MatMul(Transpose(W)), which constant folding turns
        # into a second copy of W (torch issue 108342).
        logits = F.linear(h.reshape(B * T, H), self._tied[0].weight, self.bias)
        return logits.view(B, T, self.vocab_size)  # (B, T, V)


class FillMaskHead(nn.Module):
    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.mlm = MLMHead(c, enc.embeddings.word)

    def forward(self, hidden, pooled, mlm_positions=None):
        return self.mlm(hidden, mlm_positions)


class PretrainingHead(nn.Module):
    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.mlm = MLMHead(c, enc.embeddings.word)
        self.nsp = nn.Linear(c.hidden_size, 2)

    def forward(self, hidden, pooled, mlm_positions=None):
        return self.mlm(hidden, mlm_positions), self.nsp(pooled)  # (B, T, V), (B, 2)


def _dropout(c: BertConfig) -> nn.Dropout:
    return nn.Dropout(c.classifier_dropout_p)


class ClassifierHead(nn.Module):
    """Sequence classification on the pooled [CLS] (BERT, ALBERT): (B, L)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.dropout = _dropout(c)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled):
        return self.classifier(self.dropout(pooled))


class DenseClassifierHead(nn.Module):
    """RoBERTa's (tanh) and ELECTRA's (GELU) classifier on the first token: dense -> act ->
    out_proj, (B, L)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.dropout = _dropout(c)
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.act = activation(c.family.classifier_act)
        self.out_proj = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled):
        x = self.act(self.dense(self.dropout(hidden[:, 0])))  # (B, H) from <s>
        return self.out_proj(self.dropout(x))


class PreClassifierHead(nn.Module):
    """DistilBERT's classifier on the first token: pre_classifier -> ReLU -> classifier, (B, L)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.pre_classifier = nn.Linear(c.hidden_size, c.hidden_size)
        self.act = activation(c.family.classifier_act)
        self.dropout = _dropout(c)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled):
        return self.classifier(self.dropout(self.act(self.pre_classifier(hidden[:, 0]))))


SEQUENCE_HEADS = {"pooled": ClassifierHead, "dense": DenseClassifierHead,
                  "pre_classifier": PreClassifierHead}


def sequence_head(c: BertConfig, enc: Encoder) -> nn.Module:
    """The family's own sequence-classification head (its row's `classifier`)."""
    return SEQUENCE_HEADS[c.family.classifier](c, enc)


class TokenClassifierHead(nn.Module):
    """Per-token classification: (B, T, L)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.dropout = _dropout(c)
        self.classifier = nn.Linear(c.hidden_size, c.num_labels)

    def forward(self, hidden, pooled):
        return self.classifier(self.dropout(hidden))


class SpanHead(nn.Module):
    """Extractive QA: start and end logits, each (B, T)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()
        self.qa = nn.Linear(c.hidden_size, 2)

    def forward(self, hidden, pooled):
        start, end = self.qa(hidden).unbind(-1)
        return start, end


class IdentityHead(nn.Module):
    """Feature extraction: last_hidden_state (B, T, H)."""

    def __init__(self, c: BertConfig, enc: Encoder):
        super().__init__()

    def forward(self, hidden, pooled):
        return hidden


@dataclass(frozen=True)
class TaskSpec:
    head: type            # or a function (config, encoder) -> head module
    hf_suffix: str        # the transformers class of the task, less the family's prefix
    model_types: tuple[str, ...] | None = None  # the families that have the task (None: all)
    per_token: bool = False  # the loss is a mean over labelled tokens (losses.loss_items)
    # Whether the model carries a pooler is the family's (its row's `pooler_tasks`); the
    # graph's outputs are the task record's (runtime/core/tasks.py), not declared here.

    @property
    def hf_class(self) -> str:
        """BERT's class for the task (a model's own: `Bert.hf_class`)."""
        return family().class_prefix + self.hf_suffix


# The head each task record (runtime/core/tasks.py `head`) names, built on the encoder.
HEADS = {"mlm": FillMaskHead, "sequence": sequence_head, "token": TokenClassifierHead,
         "span": SpanHead, "identity": IdentityHead}

TASKS: dict[str, TaskSpec] = {
    **{name: TaskSpec(HEADS[record.head], record.hf_suffix, per_token=record.per_token)
       for name, record in RECORDS.items()},
    # training only: no export, no pipeline, so no task record
    "pretraining": TaskSpec(PretrainingHead, "ForPreTraining", tuple(
        f.model_type for f in FAMILIES.values() if f.builds_pretraining), per_token=True),
}


def task_spec(task: str) -> TaskSpec:
    try:
        return TASKS[task]
    except KeyError:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}") from None


class Bert(nn.Module):
    """One encoder, one head. `forward` returns what docs/build.md's task table lists for `task`."""

    def __init__(self, config: BertConfig, task: str):
        super().__init__()
        spec = task_spec(task)
        if spec.model_types is not None and config.model_type not in spec.model_types:
            raise ConfigError(f"task {task!r} is not implemented for {config.model_type}",
                              f"use a {', '.join(spec.model_types)} model for {task}")
        self.config, self.task = config, task
        self.encoder = Encoder(config, pooler=task in config.family.pooler_tasks)
        self.head = spec.head(config, self.encoder)
        init_weights(self, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None):
        """`mlm_positions` (B, T) bool, MLM heads only: logits at those positions, (N, V)."""
        hidden, pooled = self.encoder(input_ids, attention_mask, token_type_ids)
        if mlm_positions is None:
            return self.head(hidden, pooled)
        return self.head(hidden, pooled, mlm_positions=mlm_positions)

    @property
    def hf_class(self) -> str:
        """The transformers class this model's checkpoints are, e.g. RobertaForMaskedLM."""
        return self.config.family.class_prefix + task_spec(self.task).hf_suffix

    def save_pretrained(self, out_dir, *, tokenizer_from=None) -> Path:
        """A Hugging Face folder (see save.py); returns its path."""
        return save_pretrained(self, out_dir, tokenizer_from=tokenizer_from)


def build_model(config: BertConfig, task: str) -> Bert:
    return Bert(config, task)
