"""Export fixtures: tiny random HF checkpoints built once per session (exports reuse them).

Built with the shared helpers in tests/conftest.py (same vocab, same LayerNorm/bias
perturbation), but session-scoped: export tests read checkpoints, never write them.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import VOCAB, perturb_, write_vocab

LAYERS = 2


def make_checkpoint(folder: Path, task: str, *, seed: int = 0, vocab: int | None = None,
                    **config) -> Path:
    """A random `transformers.BertFor<Task>` for `task` with a vocab.txt of `vocab` entries."""
    import torch
    import transformers

    from bertonnx.build import TASKS

    tokens = VOCAB + [f"[unused{i}]" for i in range(max(0, (vocab or 0) - len(VOCAB)))]
    defaults = dict(vocab_size=len(tokens), hidden_size=32, num_hidden_layers=LAYERS,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                    initializer_range=0.1)
    if task == "question-answering":
        defaults["num_labels"] = 2  # qa_outputs has num_labels rows: start and end
    elif task in ("text-classification", "token-classification"):
        defaults.update(num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"},
                        label2id={"neg": 0, "neu": 1, "pos": 2})
    torch.manual_seed(seed)
    model = getattr(transformers, TASKS[task].hf_class)(
        transformers.BertConfig(**{**defaults, **config})).eval()
    perturb_(model, seed)
    model.save_pretrained(folder)
    write_vocab(folder, tokens)
    return folder


EXPORT_TASKS = ("fill-mask", "text-classification", "token-classification",
                "question-answering", "feature-extraction")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """task -> a tiny random checkpoint folder for it."""
    root = tmp_path_factory.mktemp("ckpt")
    return {t: make_checkpoint(root / t, t) for t in EXPORT_TASKS}


@pytest.fixture(scope="session")
def exports(checkpoints, tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """task -> (folder, manifest) of its default export (fused fp32, parity on)."""
    from bertonnx.export import export_model

    root = tmp_path_factory.mktemp("exports")
    return {t: (root / t, export_model(ck, t, root / t)) for t, ck in checkpoints.items()}


@pytest.fixture(scope="session")
def wide_fill_mask(tmp_path_factory) -> Path:
    """A fill-mask checkpoint whose word embeddings dominate, as in real BERTs (size tests)."""
    return make_checkpoint(tmp_path_factory.mktemp("wide") / "fm", "fill-mask", vocab=4000,
                           hidden_size=128, intermediate_size=256)
