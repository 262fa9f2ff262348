"""Runtime fixtures: the transformers 4.57 pipeline on each shared tiny checkpoint.

`reference(name)` is transformers' pipeline on `tiny_checkpoint(name)` (tests/conftest.py), the
same weights bertonnx's `ours(name)` serves from `tiny_export(name)`.
"""
from __future__ import annotations

import pytest

from tests.conftest import SPECS


@pytest.fixture(scope="session")
def reference(tiny_checkpoint):
    # transformers and bertonnx.build (torch) only when a reference is asked for: most runtime
    # tests are torch-free
    import transformers

    from bertonnx.build import TASKS

    transformers.logging.set_verbosity_error()
    pipes = {}

    def get(name: str):
        if name not in pipes:
            ckpt = tiny_checkpoint(name)
            task = SPECS[name][0]
            model = getattr(transformers, TASKS[task].hf_class).from_pretrained(ckpt)
            tok = transformers.AutoTokenizer.from_pretrained(ckpt)
            # the tiny vocab's tokenizer_config says 512; the model has 64 positions. Our
            # runtime caps at the position table; give transformers the same limit.
            tok.model_max_length = model.config.max_position_embeddings
            pipes[name] = transformers.pipeline(task, model=model, tokenizer=tok, device="cpu")
        return pipes[name]

    return get
