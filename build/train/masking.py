"""Dynamic MLM masking (Devlin et al. 2018, §3.1; transformers' DataCollatorForLanguageModeling).

Each non-special position is selected with probability p; a selected token becomes [MASK] 80% of
the time, a random vocabulary id 10%, and stays itself 10%; its label is the original id, every
other label is IGNORE. With whole-word masking the selection (not the 80/10/10 choice, as in HF's
DataCollatorForWholeWordMask) is drawn once per word, so all pieces of a word go together.

The draws are an argument (`uniform`, shape (B, T, 3)) so that masking is a pure function and
the trainer can make it depend on (seed, epoch, sample) only — resumable and independent of how
a batch is split over processes.
"""
from __future__ import annotations

import torch

from bertonnx.build.losses import IGNORE


def sample_uniform(seed: int, keys: list[int], T: int) -> torch.Tensor:
    """(B, T, 3) uniforms, row i drawn from a generator seeded by (seed, keys[i])."""
    rows = []
    for k in keys:
        g = torch.Generator().manual_seed(seed * 1_000_003 + k)
        rows.append(torch.rand(T, 3, generator=g))
    return torch.stack(rows)


def word_start_positions(word_start: torch.Tensor) -> torch.Tensor:
    """For each position, the index of the first piece of its word. word_start (B, T) bool."""
    T = word_start.shape[1]
    idx = torch.arange(T).expand_as(word_start)
    return torch.where(word_start, idx, torch.zeros_like(idx)).cummax(dim=1).values


def mask_tokens(input_ids: torch.Tensor, special: torch.Tensor, uniform: torch.Tensor, *,
                mask_id: int, vocab_size: int, probability: float = 0.15,
                word_start: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked input_ids, labels). special (B, T) bool marks never-masked positions ([CLS],
    [SEP], [PAD]); word_start (B, T) bool, when given, turns on whole-word masking."""
    select_u = uniform[..., 0]
    if word_start is not None:
        # every piece takes the draw of its word's first piece
        select_u = select_u.gather(1, word_start_positions(word_start | special))
    selected = (select_u < probability) & ~special
    labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE))
    choice = uniform[..., 1]
    to_mask = selected & (choice < 0.8)
    to_random = selected & (choice >= 0.8) & (choice < 0.9)
    random_ids = (uniform[..., 2] * vocab_size).long().clamp_(max=vocab_size - 1)
    out = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    out = torch.where(to_random, random_ids, out)
    return out, labels
