"""Training losses as pure functions of (model outputs, labels): nothing lives in `forward`.

Each mirrors the loss transformers' `BertFor<Task>.forward` computes (modeling_bert, 4.57), so a
model trained here and one trained with HF optimise the same objective. All return a mean.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from bertonnx.runtime.core.errors import ConfigError

from .heads import task_spec

IGNORE = -100  # label value that contributes nothing (HF's and torch's ignore_index)


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM cross-entropy over positions whose label is not IGNORE. logits (B, T, V)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=IGNORE)


def nsp_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-sentence cross-entropy; label 0 = B follows A, 1 = B is random (HF's convention)."""
    return F.cross_entropy(logits.float(), labels.reshape(-1))


def pretraining_loss(mlm_logits, nsp_logits, labels, next_sentence_label) -> torch.Tensor:
    """BertForPreTraining: the plain sum of the MLM and NSP losses."""
    return mlm_loss(mlm_logits, labels) + nsp_loss(nsp_logits, next_sentence_label)


def infer_problem_type(num_labels: int, labels: torch.Tensor) -> str:
    """HF's rule when config.problem_type is unset: 1 label regresses, int labels are
    single-label, anything else (float multi-hot) is multi-label."""
    if num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


def classification_loss(logits: torch.Tensor, labels: torch.Tensor,
                        problem_type: str | None = None) -> torch.Tensor:
    """Sequence classification loss by problem type, as BertForSequenceClassification does."""
    num_labels = logits.shape[-1]
    problem_type = problem_type or infer_problem_type(num_labels, labels)
    logits = logits.float()
    if problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().float())
        return F.mse_loss(logits, labels.float())
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.float())
    raise ConfigError(f"unknown problem_type {problem_type!r}",
                      "use single_label_classification, multi_label_classification or regression")


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy; sub-word continuations and specials carry IGNORE."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=IGNORE)


def span_loss(start_logits, end_logits, start_positions, end_positions) -> torch.Tensor:
    """Extractive QA: mean of start and end cross-entropies. Positions outside the sequence are
    clamped to T and ignored, as BertForQuestionAnswering does."""
    T = start_logits.shape[1]
    start = start_positions.reshape(-1).clamp(0, T)
    end = end_positions.reshape(-1).clamp(0, T)
    return (F.cross_entropy(start_logits.float(), start, ignore_index=T)
            + F.cross_entropy(end_logits.float(), end, ignore_index=T)) / 2


def loss_items(task: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """How many terms the task's mean averages over in this batch. The trainer weights each
    micro-batch by it so that the loss (and gradient) of a global batch does not depend on how
    it was split over processes and accumulation steps. (With NSP the sentence term is weighted
    by the masked-token count too: exact for the MLM part, close for NSP.) A task whose loss
    is a mean over tokens (its TaskSpec's `per_token`) counts labelled tokens, others rows."""
    if task_spec(task).per_token:
        return (batch["labels"] != IGNORE).sum()
    return torch.tensor(batch["input_ids"].shape[0])
