"""Runtime fixtures: tiny random HF checkpoints, their fp32 exports, and transformers references.

`export_of(name)` builds (once per session) the checkpoint `SPECS[name]` describes, exports it
with `bertonnx.export.export_model` (fp32, fused) and returns (checkpoint dir, export dir).
`reference(name)` is the transformers 4.57 pipeline on the same checkpoint.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import VOCAB, perturb_, write_vocab

BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
SPECS = {
    "fill-mask": ("fill-mask", {}),
    "classify": ("text-classification",
                 dict(id2label={0: "negative", 1: "neutral", 2: "positive"})),
    "multilabel": ("text-classification",
                   dict(id2label={0: "a", 1: "b", 2: "c", 3: "d"},
                        problem_type="multi_label_classification")),
    "one-label": ("text-classification", dict(id2label={0: "score"})),
    "qa": ("question-answering", {}),
    "ner": ("token-classification", dict(id2label=BIO)),
    "embed": ("feature-extraction", {}),
}


@pytest.fixture(scope="session")
def export_of(tmp_path_factory):
    import torch
    import transformers

    from bertonnx.build import TASKS
    from bertonnx.export import ExportOptions, export_model

    root = tmp_path_factory.mktemp("runtime")
    built: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in built:
            task, cfg = SPECS[name]
            ckpt = root / name
            config = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=37,
                          max_position_embeddings=64, initializer_range=0.1)
            if "id2label" in cfg:
                cfg = {**cfg, "label2id": {v: k for k, v in cfg["id2label"].items()}}
            torch.manual_seed(0)
            model = getattr(transformers, TASKS[task].hf_class)(
                transformers.BertConfig(**config, **cfg)).eval()
            perturb_(model, 0)
            model.save_pretrained(ckpt)
            write_vocab(ckpt)
            out = root / f"{name}-onnx"
            # parity is the export tests' business; here the runtime is compared end to end
            export_model(ckpt, task, out, ExportOptions(parity=False))
            built[name] = (ckpt, out)
        return built[name]

    return get


@pytest.fixture(scope="session")
def reference(export_of):
    import transformers

    from bertonnx.build import TASKS

    transformers.logging.set_verbosity_error()
    pipes = {}

    def get(name: str):
        if name not in pipes:
            ckpt, _ = export_of(name)
            task = SPECS[name][0]
            model = getattr(transformers, TASKS[task].hf_class).from_pretrained(ckpt)
            tok = transformers.AutoTokenizer.from_pretrained(ckpt)
            # the tiny vocab's tokenizer_config says 512; the model has 64 positions. Our
            # runtime caps at the position table; give transformers the same limit.
            tok.model_max_length = model.config.max_position_embeddings
            pipes[name] = transformers.pipeline(task, model=model, tokenizer=tok, device="cpu")
        return pipes[name]

    return get


@pytest.fixture(scope="session")
def ours(export_of):
    from bertonnx.runtime import load

    pipes = {}

    def get(name: str):
        if name not in pipes:
            pipes[name] = load(export_of(name)[1])
        return pipes[name]

    return get


# The spec standing for each task where a test wants one export per task (server, Triton).
SPEC_OF_TASK = {"fill-mask": "fill-mask", "text-classification": "classify",
                "question-answering": "qa", "token-classification": "ner",
                "feature-extraction": "embed"}


@pytest.fixture(scope="session")
def exports(export_of):
    """{task: export dir}, one tiny fp32 export per task."""
    return {task: export_of(name)[1] for task, name in SPEC_OF_TASK.items()}
