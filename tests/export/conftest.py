"""Tiny random HF checkpoints (with a WordPiece vocab) for the export tests, built in tmp."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

WORDS = ("the a an is was of to and in on for with it this that he she they we you cat dog "
         "house car tree book paris france city river good bad happy sad big small red blue "
         "run walk eat read play ##s ##ed ##ing").split()


def write_vocab(folder: Path, size: int) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, ".", ",", "?", "!"]
    tokens += [f"[unused{i}]" for i in range(size - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens[:size]) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


HF_CLASSES = {
    "fill-mask": "BertForMaskedLM",
    "text-classification": "BertForSequenceClassification",
    "token-classification": "BertForTokenClassification",
    "question-answering": "BertForQuestionAnswering",
    "feature-extraction": "BertModel",
}


def make_checkpoint(folder: Path, task: str, *, layers=2, hidden=32, heads=4, vocab=120,
                    labels=3, seed=0) -> Path:
    import transformers

    torch.manual_seed(seed)
    if task == "question-answering":
        labels = 2  # BertForQuestionAnswering's qa_outputs has num_labels (start, end) rows
    cfg = transformers.BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=2 * hidden, max_position_embeddings=64, num_labels=labels,
        id2label={i: f"L{i}" for i in range(labels)}, label2id={f"L{i}": i for i in range(labels)})
    model = getattr(transformers, HF_CLASSES[task])(cfg).eval()
    with torch.no_grad():
        # Perturb LayerNorms and biases away from 1/0 so a graph that drops them cannot pass,
        # and widen the head so int8 agreement is judged on logits that are not all ties.
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.add_(0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    write_vocab(folder, vocab)
    return folder


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """task -> folder of a tiny random checkpoint for it (built once per session)."""
    root = tmp_path_factory.mktemp("ckpt")
    return {task: make_checkpoint(root / task.replace("-", "_"), task) for task in HF_CLASSES}
