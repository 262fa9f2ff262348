"""An encoder checkpoint saved without pooler weights (BGE-M3's XLM-R is one) exports for
feature-extraction: the pooler feeds no output of that graph, so it is not an untrained head
(a classifier's missing head is still refused), and the token vectors equal
transformers' within 1e-4."""
from __future__ import annotations

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from bertonnx.runtime import load
from bertonnx.runtime.core.errors import UntrainedHeadError

ATOL = 1e-4


@pytest.fixture(scope="module")
def pooler_free(tmp_path_factory):
    from tests.conftest import make_checkpoint   # torch: lazy, as conftest's fixtures

    folder = make_checkpoint(tmp_path_factory.mktemp("no-pooler") / "xlmr", "feature-extraction",
                             model_type="xlm-roberta")
    state = load_file(folder / "model.safetensors")
    assert any("pooler" in k for k in state)
    save_file({k: v for k, v in state.items() if "pooler" not in k},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_a_pooler_free_encoder_exports_for_feature_extraction(pooler_free, tmp_path):
    import torch
    import transformers

    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    manifest = export_model(pooler_free, "feature-extraction", tmp_path / "out", ExportOptions())
    assert manifest.untrained_head == {} and manifest.parity["passed"]
    texts = ["the cat sat on the mat", "paris"]
    pipe = load(tmp_path / "out", providers="cpu")
    got = pipe(texts, pooling="none", return_tensors=True)
    tok = transformers.AutoTokenizer.from_pretrained(str(pooler_free))
    hf = transformers.AutoModel.from_pretrained(str(pooler_free)).eval()
    with torch.no_grad():
        batch = tok(texts, padding=True, return_tensors="pt")
        want = hf(**batch).last_hidden_state.numpy()
    for i, g in enumerate(got):
        n = int(batch["attention_mask"][i].sum())
        assert g.shape == (1, n, want.shape[-1])
        np.testing.assert_allclose(g[0], want[i, :n], atol=ATOL, rtol=0)


def test_a_classifier_s_missing_head_is_still_refused(pooler_free, tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    with pytest.raises(UntrainedHeadError, match="no trained text-classification head"):
        export_model(pooler_free, "text-classification", tmp_path / "x",
                     ExportOptions(parity=False))
