"""Our scratch BERT vs transformers' BERT (default attention implementation) on tiny random
checkpoints: every head, varied shapes, every checkpoint form and cross-task loading.

Tolerance and masking: see _compare.py (unpadded positions, HF_ATOL scaled by max(1, |HF|)).
"""
from __future__ import annotations

import logging

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bertonnx.build import TASKS, load_checkpoint, load_pretrained, load_tokenizer
from bertonnx.build.keys import hf_to_ours, ours_to_hf

from ._compare import MODEL_TASKS, assert_close, max_diff, padded_batch, run_both

# Shapes chosen to break wrong head splits (3, 5 heads), wrong position/type tables, wrong eps
# and wrong activations. intermediate sizes are odd on purpose.
SHAPES = {
    "5heads-gelu": dict(hidden_size=20, num_attention_heads=5, intermediate_size=37,
                        max_position_embeddings=24, type_vocab_size=3, layer_norm_eps=1e-7),
    "3heads-gelu_new": dict(hidden_size=24, num_attention_heads=3, num_hidden_layers=3,
                            intermediate_size=41, hidden_act="gelu_new", layer_norm_eps=1e-5),
    "4heads-relu": dict(hidden_size=32, num_attention_heads=4, hidden_act="relu",
                        max_position_embeddings=16, type_vocab_size=3),
    "1head-silu": dict(hidden_size=16, num_attention_heads=1, num_hidden_layers=1,
                       intermediate_size=29, hidden_act="silu", layer_norm_eps=1e-3),
}


def hf_model(folder, task, **kwargs):
    cls = getattr(transformers, TASKS[task].hf_class)
    return cls.from_pretrained(folder, **kwargs).eval()


def check_parity(folder, task, *, seq_len=None, seed=0):
    """Load `folder` both ways and compare on a right-padded batch; returns our model."""
    ours = load_pretrained(folder, task)
    ref = hf_model(folder, task)
    c = ref.config
    batch = padded_batch(c.vocab_size, seq_len or min(c.max_position_embeddings, 13),
                         c.type_vocab_size, seed=seed)
    assert_close(task, *run_both(ours, ref, batch), batch[1])
    return ours


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("task", MODEL_TASKS)
def test_every_head_matches_transformers(tiny_hf_checkpoint, task, shape):
    folder = tiny_hf_checkpoint(task, **SHAPES[shape])
    check_parity(folder, task)


def test_full_length_sequence(tiny_hf_checkpoint):
    # T == max_position_embeddings: the last position row is used, nothing beyond it.
    folder = tiny_hf_checkpoint("fill-mask", max_position_embeddings=16)
    check_parity(folder, "fill-mask", seq_len=16)


@pytest.mark.parametrize("problem_type,num_labels", [
    ("single_label_classification", 3), ("multi_label_classification", 4), ("regression", 1)])
def test_classification_problem_types(tiny_hf_checkpoint, problem_type, num_labels):
    folder = tiny_hf_checkpoint("text-classification", problem_type=problem_type,
                                num_labels=num_labels)
    ours = check_parity(folder, "text-classification")
    assert ours.config.problem_type == problem_type
    assert ours.config.num_labels == num_labels


def test_token_classification_labels(tiny_hf_checkpoint):
    labels = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    folder = tiny_hf_checkpoint("token-classification", id2label=labels,
                                label2id={v: k for k, v in labels.items()})
    ours = check_parity(folder, "token-classification")
    assert ours.config.id2label == labels


def test_eager_attention_also_matches(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("pretraining", **SHAPES["5heads-gelu"])
    ours = load_pretrained(folder, "pretraining")
    ref = hf_model(folder, "pretraining", attn_implementation="eager")
    batch = padded_batch(ref.config.vocab_size, 13, 3)
    assert_close("pretraining", *run_both(ours, ref, batch), batch[1])


def test_defaults_for_mask_and_token_types(tiny_hf_checkpoint):
    # model(input_ids) alone means all attended, all segment 0 — as in transformers.
    folder = tiny_hf_checkpoint("question-answering")
    ours, ref = load_pretrained(folder, "question-answering"), hf_model(folder, "question-answering")
    ids = padded_batch(ref.config.vocab_size, 9, lengths=(9, 9))[0]
    with torch.no_grad():
        a, b = ours(ids), ref(input_ids=ids)
    assert_close("question-answering", a, b, torch.ones_like(ids))


def test_padding_does_not_leak(tiny_hf_checkpoint):
    # A sequence alone and the same sequence padded inside a batch give the same outputs.
    folder = tiny_hf_checkpoint("feature-extraction")
    ours = load_pretrained(folder, "feature-extraction")
    ids, mask, types = padded_batch(ours.config.vocab_size, 12)
    with torch.no_grad():
        batched = ours(ids, mask, types)
        alone = ours(ids[1:2, :8], mask[1:2, :8], types[1:2, :8])
    torch.testing.assert_close(batched[1:2, :8], alone, rtol=0, atol=1e-5)


def test_loader_that_ignores_layernorm_would_fail(tiny_hf_checkpoint):
    # Guard on the fixture: resetting one LayerNorm to 1/0 must break parity, or the perturbation
    # is too weak to catch a loader that skips LayerNorm weights.
    folder = tiny_hf_checkpoint("fill-mask")
    ours, ref = load_pretrained(folder, "fill-mask"), hf_model(folder, "fill-mask")
    with torch.no_grad():
        ours.encoder.layers[0].attn_norm.weight.fill_(1.0)
        ours.encoder.layers[0].attn_norm.bias.zero_()
    batch = padded_batch(ref.config.vocab_size, 10)
    assert max_diff("fill-mask", *run_both(ours, ref, batch), batch[1]) > 100 * 1e-5


# --- checkpoint forms --------------------------------------------------------------------------

def rewrite_safetensors(folder, rename):
    path = folder / "model.safetensors"
    state = load_file(path)
    save_file({rename(k): v for k, v in state.items()}, path, metadata={"format": "pt"})


@pytest.mark.parametrize("form", ["safetensors", "bin", "sharded-safetensors", "sharded-bin"])
def test_checkpoint_forms(tiny_hf_checkpoint, tmp_path, form):
    folder = tiny_hf_checkpoint("pretraining", **SHAPES["3heads-gelu_new"])
    out = tmp_path / form
    model = hf_model(folder, "pretraining")
    model.save_pretrained(out, safe_serialization="safetensors" in form,
                          max_shard_size="20KB" if "sharded" in form else "5GB")
    files = sorted(p.name for p in out.iterdir())
    if "sharded" in form:
        assert any(n.endswith(".index.json") for n in files), files
        assert sum(n.startswith("model-") or n.startswith("pytorch_model-") for n in files) > 2
    else:
        assert ("model.safetensors" if form == "safetensors" else "pytorch_model.bin") in files
    ours = load_pretrained(out, "pretraining")
    batch = padded_batch(model.config.vocab_size, 13, model.config.type_vocab_size)
    assert_close("pretraining", *run_both(ours, model, batch), batch[1])


def test_tensorflow_layernorm_names(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("fill-mask", **SHAPES["5heads-gelu"])
    ref = hf_model(folder, "fill-mask")
    rewrite_safetensors(folder, lambda k: k.replace("LayerNorm.weight", "LayerNorm.gamma")
                        .replace("LayerNorm.bias", "LayerNorm.beta"))
    assert any(k.endswith("LayerNorm.gamma") for k in load_file(folder / "model.safetensors"))
    ours = load_pretrained(folder, "fill-mask")
    batch = padded_batch(ref.config.vocab_size, 13, 3)
    assert_close("fill-mask", *run_both(ours, ref, batch), batch[1])


def test_bare_model_keys_with_bert_prefix(tiny_hf_checkpoint):
    # BertModel checkpoints usually have bare keys ("embeddings.…"); some are saved with "bert.".
    folder = tiny_hf_checkpoint("feature-extraction")
    ref = hf_model(folder, "feature-extraction")
    assert not any(k.startswith("bert.") for k in load_file(folder / "model.safetensors"))
    rewrite_safetensors(folder, lambda k: "bert." + k)
    ours = load_pretrained(folder, "feature-extraction")
    batch = padded_batch(ref.config.vocab_size, 13)
    assert_close("feature-extraction", *run_both(ours, ref, batch), batch[1])


def test_task_checkpoint_keys_without_bert_prefix(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("token-classification")
    ref = hf_model(folder, "token-classification")
    rewrite_safetensors(folder, lambda k: k.removeprefix("bert."))
    ours = load_pretrained(folder, "token-classification")
    batch = padded_batch(ref.config.vocab_size, 13)
    assert_close("token-classification", *run_both(ours, ref, batch), batch[1])


# --- checkpoints saved from one class, loaded for another task ---------------------------------

SOURCES = ["feature-extraction", "fill-mask", "pretraining", "text-classification",
           "token-classification", "question-answering"]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("task", MODEL_TASKS)
def test_cross_task_loading(tiny_hf_checkpoint, caplog, source, task):
    """The encoder matches HF's; the head weights initialised are exactly those transformers
    reports missing for the same pair, and they are named in a warning (none when equal)."""
    folder = tiny_hf_checkpoint(source, **SHAPES["5heads-gelu"])
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        loaded = load_checkpoint(folder, task)
    ours = loaded.model
    _, info = getattr(transformers, TASKS[task].hf_class).from_pretrained(
        folder, output_loading_info=True)
    expected = {hf_to_ours(k) for k in info["missing_keys"]} - {None}
    assert set(loaded.head_initialised) == expected
    warned = [r.getMessage() for r in caplog.records
              if r.name == "bertonnx" and r.levelno == logging.WARNING]
    if expected:
        assert len(warned) == 1 and task in warned[0]
        assert all(ours_to_hf(k) in warned[0] for k in expected)
    else:
        assert warned == []
    # The encoder itself: compare last_hidden_state with HF BertModel on the same folder.
    ref = transformers.BertModel.from_pretrained(folder).eval()
    ids, mask, types = padded_batch(ref.config.vocab_size, 13, 3)
    with torch.no_grad():
        hidden, _ = ours.encoder(ids, mask, types)
        out = ref(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert_close("feature-extraction", hidden, out, mask)


def test_new_label_count_reinitialises_classifier(tiny_hf_checkpoint, caplog):
    folder = tiny_hf_checkpoint("text-classification", num_labels=2)
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        loaded = load_checkpoint(folder, "text-classification", num_labels=5)
    assert loaded.model.config.num_labels == 5
    assert set(loaded.head_initialised) == {"head.classifier.weight", "head.classifier.bias"}
    assert "classifier.weight" in caplog.text


@pytest.mark.slow
def test_minilm_feature_extraction(minilm_dir):
    tok = load_tokenizer(minilm_dir)
    texts = ["The quick brown fox jumps over the lazy dog.",
             "Paris is the capital of France.", "Hi!",
             "Sentence embeddings are mean-pooled token states, normalised to unit length."]
    enc = tok.encode_batch(texts)
    T = max(len(e.ids) for e in enc)
    ids = torch.zeros(len(texts), T, dtype=torch.long)
    mask, types = torch.zeros_like(ids), torch.zeros_like(ids)
    for row, e in enumerate(enc):
        n = len(e.ids)
        ids[row, :n], mask[row, :n] = torch.tensor(e.ids), 1
        types[row, :n] = torch.tensor(e.type_ids)
    ours = load_pretrained(minilm_dir, "feature-extraction")
    ref = transformers.BertModel.from_pretrained(minilm_dir).eval()
    assert_close("feature-extraction", *run_both(ours, ref, (ids, mask, types)), mask)
