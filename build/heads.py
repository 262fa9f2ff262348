"""Task heads composed on the one encoder, and the task table that picks them.

Each head takes the encoder's (hidden (B, T, H), pooled (B, H) or None) and returns what
the task table promises (docs/build.md). Losses are pure functions in `losses.py`, not in forward.
A family's own heads (its row in runtime/core/families.py) are switches here too: the MLM head's
width and activation, and which sequence classifier (`SEQUENCE_HEADS`) sits on the encoder.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.families import FAMILIES, family
from bertonnx.runtime.core.sparse_encoder import splade_pooling
from bertonnx.runtime.core.tasks import TASKS as RECORDS

from . import modernbert
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


def log1p(x):
    """log(1 + x), accurate for tiny x too, in ops the ONNX exporter writes: ONNX has no Log1p,
    and log(1 + x) alone rounds every x below 6e-8 to 0, dropping ids sentence-transformers'
    torch.log1p keeps. Goldberg's form: log(u) * x / (u - 1), u = 1 + x (x where u rounds to 1)."""
    u = 1 + x
    d = u - 1
    tiny = d == 0
    return torch.where(tiny, x, torch.log(u) * (x / torch.where(tiny, torch.ones_like(d), d)))


class SpladeHead(nn.Module):
    """SPLADE (sentence-transformers' SpladePooling): the family's fill-mask head's logits,
    log1p(relu(.)) (a second log1p for "log1p_relu"), over the unpadded tokens by max or sum:
    (B, V). The fill-mask head's weights sit here under their own names, so a ForMaskedLM
    checkpoint loads and saves through the family's fill-mask keys.

    SpladePooling counts a padded token's logits as 0. Max pools first — relu and log1p never
    decrease, so the max of their values is their value at the max logit, and only (B, V)
    numbers pass through them — and a padded token decodes the hidden state of the row's first
    real token instead, whose logits are in the max already: the graph then holds one (B·T, V)
    buffer, the decoder's output, and no (B, T, V) mask or activation beside it. Sum masks
    after the activation (f(0) = 0, so the same numbers)."""

    takes_mask = True

    def __init__(self, c: BertConfig, enc: Encoder, pooling_strategy: str = "max",
                 activation_function: str = "relu"):
        super().__init__()
        decoder = family_head("mlm")(c, enc)   # (hidden, pooled) -> (B, T, V)
        for name, child in decoder.named_children():
            self.add_module(name, child)
        for name, p in decoder.named_parameters(recurse=False):
            self.register_parameter(name, p)
        self._decoder = (decoder,)   # its forward; its weights are registered above
        self.pooling, self.logs = pooling_strategy, 2 if activation_function == "log1p_relu" else 1

    def forward(self, hidden, pooled, attention_mask):
        decode = self._decoder[0]
        keep = attention_mask[:, :, None].to(hidden.dtype)                      # (B, T, 1)
        if self.pooling == "max":
            first = keep.argmax(1, keepdim=True)                                # (B, 1, 1)
            real = hidden.gather(1, first.expand(-1, 1, hidden.shape[-1]))      # (B, 1, H)
            x = decode(torch.where(keep > 0, hidden, real), pooled).amax(1)     # (B, V)
        else:
            x = decode(hidden, pooled)                                          # (B, T, V)
        x = F.relu(x)
        for _ in range(self.logs):
            x = log1p(x)
        return x if self.pooling == "max" else (x * keep).sum(1)               # (B, V)


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

    # the pooler's output is never read here (the graph answers the token vectors), so a
    # checkpoint without pooler weights (BGE-M3's XLM-R) lacks nothing this task runs
    reads_pooler = False

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
    # the head's keyword arguments a model folder chooses (HEAD_OPTIONS): folder -> kwargs
    folder_options: Callable[[Path | None], dict] | None = None
    # Whether the model carries a pooler is the family's (its row's `pooler_tasks`); the
    # graph's outputs are the task record's (runtime/core/tasks.py), not declared here.

    @property
    def hf_class(self) -> str:
        """BERT's class for the task (a model's own: `Bert.hf_class`)."""
        return family().class_prefix + self.hf_suffix


# The head each task record (runtime/core/tasks.py `head`) names, built on the encoder.
HEADS = {"mlm": FillMaskHead, "sequence": sequence_head, "token": TokenClassifierHead,
         "span": SpanHead, "identity": IdentityHead, "splade": SpladeHead}


def _splade_options(folder) -> dict:
    """SpladeHead's pooling, as the model folder's SpladePooling module chooses it."""
    return splade_pooling(folder).as_dict()


# A head whose shape a model folder chooses beyond config.json: head name -> (folder or None)
# -> the head's keyword arguments (load_checkpoint passes them to Bert)
HEAD_OPTIONS = {"splade": _splade_options}


def _with_activation(head):
    """ModernBERT's heads: built with the config's classifier_activation."""
    return lambda c, enc: head(c, enc, activation(c.classifier_activation))


# A family's own heads (its row's `heads`) by head name, where it has no BERT-shaped ones:
# ModernBERT's each sit on its dense -> act -> norm prediction head (build/modernbert.py).
OWN_HEADS = {"prediction": {
    "mlm": _with_activation(modernbert.MaskedLMHead),
    "sequence": _with_activation(modernbert.SequenceHead),
    "token": _with_activation(modernbert.TokenHead),
    "span": _with_activation(modernbert.SpanHead),
    "identity": IdentityHead, "splade": SpladeHead}}


def family_head(name: str):
    """The builder of head `name` for the model's family: the row's own heads, else HEADS'."""
    def build(c: BertConfig, enc: Encoder, **options) -> nn.Module:
        return OWN_HEADS.get(c.family.heads, HEADS)[name](c, enc, **options)
    return build


def families_with(name: str) -> tuple[str, ...] | None:
    """The families that have head `name` (None: all of them)."""
    have = tuple(f.model_type for f in FAMILIES.values()
                 if name in OWN_HEADS.get(f.heads, HEADS))
    return None if len(have) == len(FAMILIES) else have


TASKS: dict[str, TaskSpec] = {
    **{name: TaskSpec(family_head(record.head), record.hf_suffix, families_with(record.head),
                      per_token=record.per_token,
                      folder_options=HEAD_OPTIONS.get(record.head))
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


def class_task(task: str) -> str:
    """The first task on `task`'s transformers class (text-classification for text-ranking and
    zero-shot-classification, which run on ForSequenceClassification too)."""
    suffix = task_spec(task).hf_suffix
    return next((name for name, spec in TASKS.items() if spec.hf_suffix == suffix), task)


class Bert(nn.Module):
    """One encoder, one head. `forward` returns what docs/build.md's task table lists for `task`."""

    def __init__(self, config: BertConfig, task: str, **head_options):
        """`head_options`: the head's own choices (TaskSpec.folder_options), e.g. SPLADE's
        pooling; the config says everything else."""
        super().__init__()
        spec = task_spec(task)
        if spec.model_types is not None and config.model_type not in spec.model_types:
            raise ConfigError(f"task {task!r} is not implemented for {config.model_type}",
                              f"use a {', '.join(spec.model_types)} model for {task}")
        self.config, self.task = config, task
        # the pooler is the transformers class's: the family row names the class's first task
        self.encoder = Encoder(config, pooler=class_task(task) in config.family.pooler_tasks)
        self.head = spec.head(config, self.encoder, **head_options)
        # every choice the head made, the defaults included (the manifest records them)
        self.head_options = {**(spec.folder_options(None) if spec.folder_options else {}),
                             **head_options}
        init_weights(self, config.initializer_range)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None):
        """`mlm_positions` (B, T) bool, MLM heads only: logits at those positions, (N, V)."""
        hidden, pooled = self.encoder(input_ids, attention_mask, token_type_ids)
        if getattr(self.head, "takes_mask", False):  # pooling over the unpadded tokens
            mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            return self.head(hidden, pooled, mask)
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
