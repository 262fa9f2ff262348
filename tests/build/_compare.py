"""Helpers for comparing our model with transformers' on a right-padded batch.

Tolerance: max |ours − HF| ≤ HF_ATOL · max(1, max |HF|) — absolute 1e-5 for outputs of unit
scale, relative to the largest reference value beyond that (MLM logits of a random model reach
~10, and float32 rounding grows with the magnitude).
"""
from __future__ import annotations

import torch

from bertonnx.build import TASKS
from bertonnx.runtime.core.contract import HF_ATOL
from bertonnx.runtime.core.tasks import TASKS as RECORDS


def _model_tasks() -> tuple[str, ...]:
    """Every task whose model (its record's head on its transformers class) no earlier task
    builds: text-ranking and zero-shot-classification build text-classification's model
    exactly, so the build tests run it once (their pipelines' tests run them)."""
    seen, tasks = set(), []
    for task in TASKS:
        record = RECORDS.get(task)
        model = (record.head, record.hf_suffix) if record else task
        if model not in seen:
            seen.add(model)
            tasks.append(task)
    return tuple(tasks)


# transformers' output attribute names, in the order our model returns them.
HF_OUTPUTS = {
    "fill-mask": ("logits",),
    "text-classification": ("logits",),
    "token-classification": ("logits",),
    "question-answering": ("start_logits", "end_logits"),
    "feature-extraction": ("last_hidden_state",),
    "pretraining": ("prediction_logits", "seq_relationship_logits"),
}
# The tasks the build tests compare with transformers' class. sparse-embedding's head pools the
# MLM logits as sentence-transformers' SpladePooling does, which no transformers class returns:
# tests/build/test_splade_head.py compares it with sentence-transformers.
MODEL_TASKS = tuple(t for t in _model_tasks() if t in HF_OUTPUTS)
assert set(_model_tasks()) - set(MODEL_TASKS) == {"sparse-embedding"}, "a task no test builds"
# Outputs with one row per token; the others have one row per sequence.
PER_TOKEN = {"fill-mask": (True,), "text-classification": (False,),
             "token-classification": (True,), "question-answering": (True, True),
             "feature-extraction": (True,), "pretraining": (True, False)}


def padded_batch(vocab_size: int, max_len: int, type_vocab_size: int = 2, *, seed: int = 0,
                 lengths: tuple[int, ...] | None = None, pad_token_id: int = 0):
    """(input_ids, attention_mask, token_type_ids), right padded with `pad_token_id`; ids from
    5 up, clear of every family's special tokens."""
    g = torch.Generator().manual_seed(seed)
    T = max_len
    lengths = lengths or (T, max(1, T - 4), min(2, T))
    ids = torch.randint(5, vocab_size, (len(lengths), T), generator=g)
    types = torch.randint(0, max(1, type_vocab_size), (len(lengths), T), generator=g)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return torch.where(mask.bool(), ids, pad_token_id), mask, types * mask


def as_tuple(out) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def max_diff(task: str, ours, hf_out, mask: torch.Tensor) -> float:
    """Max of |ours − HF| / max(1, max |HF|) over outputs, unpadded positions only."""
    worst = 0.0
    ref = tuple(getattr(hf_out, name) for name in HF_OUTPUTS[task])
    for a, b, per_token in zip(as_tuple(ours), ref, PER_TOKEN[task], strict=True):
        assert a.shape == b.shape, (task, a.shape, b.shape)
        if per_token:
            a, b = a[mask.bool()], b[mask.bool()]
        scale = max(1.0, b.abs().max().item())
        worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def assert_close(task: str, ours, hf_out, mask: torch.Tensor) -> None:
    d = max_diff(task, ours, hf_out, mask)
    assert d <= HF_ATOL, f"{task}: max |ours - HF| (scaled) = {d:.3g} > {HF_ATOL}"


def run_both(ours, hf, batch):
    ids, mask, types = batch
    with torch.no_grad():
        return (ours(ids, attention_mask=mask, token_type_ids=types),
                hf(input_ids=ids, attention_mask=mask, token_type_ids=types))
