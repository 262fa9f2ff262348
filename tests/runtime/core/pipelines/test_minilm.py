"""The real all-MiniLM-L6-v2 encoder under a random QA head: runtime == transformers."""
from __future__ import annotations

import shutil

import pytest
import torch
import transformers

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load

from tests.runtime._compare import assert_same

CONTEXT = ("The Amazon rainforest covers much of the Amazon basin of South America. The basin "
           "covers seven million square kilometres, of which five and a half million are "
           "covered by the rainforest. The region includes territory belonging to nine nations "
           "and 3,344 formally acknowledged indigenous territories. The majority of the forest, "
           "60%, is in Brazil, followed by Peru with 13%, Colombia with 10%, and with minor "
           "amounts in Bolivia, Ecuador, French Guiana, Guyana, Suriname, and Venezuela.")


@pytest.mark.slow
def test_minilm_question_answering(minilm_dir, tmp_path):
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.BertForQuestionAnswering.from_pretrained(minilm_dir).eval()
    ckpt = tmp_path / "minilm-qa"
    model.save_pretrained(ckpt)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, ckpt / name)
    export_model(ckpt, "question-answering", tmp_path / "onnx", ExportOptions(parity=False))
    ours = load(tmp_path / "onnx")
    ref = transformers.pipeline("question-answering", model=model,
                                tokenizer=transformers.AutoTokenizer.from_pretrained(ckpt))
    for kwargs in (dict(top_k=1), dict(top_k=3, max_seq_len=64, doc_stride=16,
                                       handle_impossible_answer=True)):
        q = dict(question="Which country holds most of the forest?", context=CONTEXT, **kwargs)
        theirs = ref(**q)
        if kwargs["top_k"] > 1:
            assert len(theirs) == kwargs["top_k"]
        assert_same(ours(**q), theirs)
