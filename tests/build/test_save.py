"""Round trip: ours -> save_pretrained -> transformers.BertFor<Task>.from_pretrained (no missing,
unexpected or mismatched keys, same outputs) -> back through load_pretrained (bit-identical)."""
from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file

from bertonnx.build import (TASKS, BertConfig, build_model, load_checkpoint, load_pretrained,
                            load_tokenizer)

from ._compare import MODEL_TASKS, assert_close, padded_batch, run_both

CONFIG = BertConfig(vocab_size=90, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                    intermediate_size=40, max_position_embeddings=20, type_vocab_size=3,
                    layer_norm_eps=1e-6, hidden_act="gelu_new", initializer_range=0.1)


def scratch_model(task, config=CONFIG, seed=0):
    """A model built from our config (not from HF), LayerNorms and biases moved off 1/0."""
    torch.manual_seed(seed)
    model = build_model(config, task).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def check_round_trip(model, tmp_path, save=None):
    """`save` (default `model.save_pretrained`) writes the folder and returns its path."""
    task = model.task
    out = (save or model.save_pretrained)(tmp_path / "saved")
    assert out == tmp_path / "saved"
    hf_cls = getattr(transformers, TASKS[task].hf_class)
    ref, info = hf_cls.from_pretrained(out, output_loading_info=True)
    ref.eval()
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    assert info["mismatched_keys"] == [] and info["error_msgs"] == []
    c = model.config
    batch = padded_batch(c.vocab_size, 11, c.type_vocab_size)
    ours_out, hf_out = run_both(model, ref, batch)
    assert_close(task, ours_out, hf_out, batch[1])
    loaded = load_checkpoint(out, task)
    assert loaded.head_initialised == [] and loaded.source_dir == out
    back = loaded.model
    with torch.no_grad():
        again = back(*batch)
    for a, b in zip(ours_out if isinstance(ours_out, tuple) else (ours_out,),
                    again if isinstance(again, tuple) else (again,)):
        assert torch.equal(a, b)
    return out, ref


@pytest.mark.parametrize("task", MODEL_TASKS)
def test_round_trip_from_scratch(tmp_path, task):
    out, ref = check_round_trip(scratch_model(task), tmp_path)
    assert not (out / "vocab.txt").exists()  # a model built in memory has no tokenizer to copy
    saved = json.loads((out / "config.json").read_text())
    assert saved["architectures"] == [TASKS[task].hf_class]
    assert saved["model_type"] == "bert"
    assert ref.config.hidden_act == "gelu_new" and ref.config.type_vocab_size == 3


@pytest.mark.parametrize("problem_type,labels", [
    ("single_label_classification", ["neg", "neu", "pos"]),
    ("multi_label_classification", ["a", "b", "c", "d"]),
    ("regression", ["score"])])
def test_round_trip_keeps_labels_and_problem_type(tmp_path, problem_type, labels):
    config = CONFIG.replace(problem_type=problem_type).with_labels(labels)
    _, ref = check_round_trip(scratch_model("text-classification", config), tmp_path)
    assert ref.config.problem_type == problem_type
    assert ref.config.id2label == dict(enumerate(labels))
    assert ref.config.label2id == {v: i for i, v in enumerate(labels)}


@pytest.mark.parametrize("task", ["fill-mask", "question-answering", "feature-extraction"])
def test_round_trip_of_loaded_checkpoint_copies_tokenizer(tiny_hf_checkpoint, tmp_path, task):
    src = tiny_hf_checkpoint(task)
    loaded = load_checkpoint(src, task)
    out, _ = check_round_trip(loaded.model, tmp_path, save=loaded.save_pretrained)
    for name in ("vocab.txt", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (src / name).read_bytes()
    assert load_tokenizer(out).encode("the cat sat").ids == load_tokenizer(src).encode(
        "the cat sat").ids


def test_tied_decoder_saved_once_and_tied_after_load(tmp_path):
    model = scratch_model("fill-mask")
    out = model.save_pretrained(tmp_path / "mlm")
    keys = set(load_file(out / "model.safetensors"))
    assert "cls.predictions.decoder.weight" not in keys  # tied: transformers re-ties it
    ref = transformers.BertForMaskedLM.from_pretrained(out)
    assert ref.cls.predictions.decoder.weight.data_ptr() == \
        ref.bert.embeddings.word_embeddings.weight.data_ptr()
    back = load_pretrained(out, "fill-mask")
    assert back.head.mlm._tied[0].weight is back.encoder.embeddings.word.weight
