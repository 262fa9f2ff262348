"""A BGE-M3 folder's two head files, written beside a tiny XLM-R encoder as FlagEmbedding saves
them: the shared `bge-m3` model of tests/conftest.py (SPECS). FlagEmbedding's own outputs on such
a folder are tests/bge_m3_reference.py's."""
from __future__ import annotations

from pathlib import Path


def write_m3_files(folder: Path, hidden: int, seed: int, dim: int | None = None) -> Path:
    """colbert_linear.pt (Linear(hidden, dim)) and sparse_linear.pt (Linear(hidden, 1)): random
    state dicts, torch.save'd as FlagEmbedding's M3 model.save writes them."""
    import torch   # the suite's tests that build checkpoints have it; readers of SPECS need not

    torch.manual_seed(seed)
    for name, layer in (("colbert_linear.pt", torch.nn.Linear(hidden, dim or hidden)),
                        ("sparse_linear.pt", torch.nn.Linear(hidden, 1))):
        with torch.no_grad():   # biases away from 0, so a runtime that drops them fails
            layer.bias.normal_(0, 0.3)
        torch.save(layer.state_dict(), folder / name)
    return folder
