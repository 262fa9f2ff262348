"""The SPLADE head (build/heads.py SpladeHead) against sentence-transformers' own SpladePooling
applied to transformers' MLM logits, for every family and every pooling choice, on a
right-padded batch (and saved as the family's ForMaskedLM); and the exportable log1p it uses,
against torch.log1p."""
from __future__ import annotations

import pytest
import torch
import transformers

from bertonnx.build import Bert, load_checkpoint
from bertonnx.build.heads import log1p
from bertonnx.runtime.core.contract import HF_ATOL
from bertonnx.runtime.core.families import FAMILIES

from ._compare import padded_batch

splade = pytest.importorskip("sentence_transformers.sparse_encoder.modules")

CHOICES = [("max", "relu"), ("sum", "relu"), ("max", "log1p_relu"), ("sum", "log1p_relu")]


@pytest.mark.parametrize("model_type", tuple(FAMILIES))
def test_every_family_pools_as_splade_pooling(tiny_hf_checkpoint, tmp_path, model_type):
    folder = tiny_hf_checkpoint("fill-mask", model_type=model_type)
    hf = transformers.AutoModelForMaskedLM.from_pretrained(folder).eval()
    loaded = load_checkpoint(folder, "sparse-embedding").model   # max, relu: no modules.json
    # the fill-mask head's weights under the family's own names: saved, a ForMaskedLM again
    _, info = transformers.AutoModelForMaskedLM.from_pretrained(
        loaded.save_pretrained(tmp_path / "saved"), output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == [], info
    c = loaded.config
    ids, mask, types = padded_batch(c.vocab_size, 13, c.type_vocab_size,
                                    pad_token_id=c.pad_token_id)
    kwargs = {"token_type_ids": types} if c.type_vocab_size else {}
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask, **kwargs).logits
    for pooling, activation in CHOICES:
        ours = Bert(c, "sparse-embedding", pooling_strategy=pooling,
                    activation_function=activation).eval()
        ours.load_state_dict(loaded.state_dict())
        with torch.no_grad():
            want = splade.SpladePooling(pooling, activation).eval()(
                {"token_embeddings": logits, "attention_mask": mask})["sentence_embedding"]
            got = ours(ids, attention_mask=mask, token_type_ids=types)
        assert got.shape == want.shape == (3, c.vocab_size)
        assert torch.equal(got > 0, want > 0), (model_type, pooling, activation)
        scale = max(1.0, want.abs().max().item())
        assert (got - want).abs().max().item() <= HF_ATOL * scale, (model_type, pooling)


def test_log1p_is_torchs_down_to_the_tiniest_values():
    x = torch.tensor([0.0, 1e-30, 1e-12, 3e-8, 1e-7, 1e-4, 0.5, 1.0, 7.0, 1e3, 1e30])
    want = torch.log1p(x)
    got = log1p(x)
    assert torch.all(got > 0) == torch.all(want > 0) and got[0] == 0
    torch.testing.assert_close(got, want, rtol=2e-7, atol=0)
    # what it is for: log(1 + x) alone loses every weight below 6e-8
    assert torch.log(1 + x)[3] == 0 and got[3] > 0
