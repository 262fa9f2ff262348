"""runtime/core/sentence_transformers.py and sentence_modules.py without a model: both folder
formats read into one stack, the manifest's record round-trips and refuses what this runtime
cannot compute in one line, and each numpy piece equals sentence-transformers' own torch module
on random token vectors (every pooling mode, prompt tokens left out, the activations, the
safetensors reader)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from safetensors.torch import save_file as save_torch
from sentence_transformers.sentence_transformer.modules import Pooling as STPooling

from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.postprocess import pool
from bertonnx.runtime.core.sentence_modules import (ACTIVATIONS, Dense, Normalize, Pooling,
                                                    SentenceStack, read_safetensors)
from bertonnx.runtime.core.sentence_transformers import folder_task, read_folder
from bertonnx.runtime.core.tasks import POOLING_MODES

V5 = "sentence_transformers.base.modules."


def write(folder: Path, files: dict) -> Path:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(json.dumps(data), encoding="utf-8")
    return folder


def listing(*types: str) -> list:
    return [{"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_{t.rsplit('.', 1)[-1]}",
             "type": t} for i, t in enumerate(types)]


def test_both_formats_read_to_the_same_stack(tmp_path):
    weights = {"linear.weight": np.zeros((8, 64), np.float32),
               "linear.bias": np.zeros(8, np.float32)}
    classic = write(tmp_path / "classic", {
        "modules.json": listing(*(f"sentence_transformers.models.{k}" for k in
                                  ("Transformer", "Pooling", "Dense", "Normalize"))),
        "sentence_bert_config.json": {"max_seq_length": 128, "do_lower_case": True},
        "1_Pooling/config.json": {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
                                  "pooling_mode_mean_tokens": True,
                                  "pooling_mode_max_tokens": False, "include_prompt": False},
        "2_Dense/config.json": {"in_features": 64, "out_features": 8, "bias": True,
                                "activation_function": "torch.nn.modules.activation.Tanh"},
        "config_sentence_transformers.json": {"prompts": {"query": "query: "},
                                              "default_prompt_name": "query"}})
    v5 = write(tmp_path / "v5", {
        "modules.json": listing(V5 + "transformer.Transformer",
                                "sentence_transformers.sentence_transformer.modules.pooling."
                                "Pooling", V5 + "dense.Dense",
                                "sentence_transformers.sentence_transformer.modules.normalize."
                                "Normalize"),
        "sentence_bert_config.json": {"transformer_task": "feature-extraction",
                                      "module_output_name": "token_embeddings",
                                      "processing_kwargs": {"text": {"max_length": 128}}},
        "1_Pooling/config.json": {"embedding_dimension": 32, "pooling_mode": ["cls", "mean"],
                                  "include_prompt": False},
        "2_Dense/config.json": {"in_features": 64, "out_features": 8, "bias": True,
                                "activation_function": "torch.nn.modules.activation.Tanh",
                                "module_input_name": "sentence_embedding",
                                "module_output_name": "sentence_embedding"},
        "config_sentence_transformers.json": {"model_type": "SentenceTransformer",
                                              "prompts": {"query": "query: "},
                                              "default_prompt_name": "query",
                                              "similarity_fn_name": "cosine"}})
    save_file(weights, str(classic / "2_Dense" / "model.safetensors"))
    (v5 / "2_Dense" / "pytorch_model.bin").write_bytes(b"")   # named, not read here
    a, b = read_folder(classic), read_folder(v5)
    assert (a.format, b.format) == ("v2-v4", "v5")
    assert a.modules[0] == b.modules[0] == Pooling(("cls", "mean"), False, 32)
    assert a.modules[2] == b.modules[2] == Normalize()
    assert (a.modules[1].weights, b.modules[1].weights) == ("2_Dense/model.safetensors",
                                                            "2_Dense/pytorch_model.bin")
    assert (a.max_seq_length, a.do_lower_case, b.max_seq_length, b.do_lower_case) == (
        128, True, 128, False)   # v5 bakes lowercasing into tokenizer.json
    assert a.defaults() == {"pooling": "cls+mean", "normalize": True}
    assert a.width(32, ("cls", "mean")) == 8
    assert folder_task(classic) == folder_task(v5) == "feature-extraction"
    # the manifest's record: the same stack back, weights read from the listed file
    again = SentenceStack.from_json(json.loads(json.dumps(a.to_json())), "m")
    assert again == a
    loaded = again.with_weights(classic, {"2_Dense/model.safetensors": "sha"})
    assert loaded.modules[1].weight.shape == (8, 64)
    with pytest.raises(ArtifactError, match="does not list 2_Dense/model.safetensors"):
        again.with_weights(classic, {})
    # a .bin is a pickle: only export reads it (with torch)
    with pytest.raises(ArtifactError, match="is a pickle.*bertonnx adopt"):
        b.with_weights(v5)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["modules"].append({"type": "LayerNorm"}), "module 'LayerNorm'"),
    (lambda d: d["modules"][1].update(activation_function="Hardswish"),
     "Dense activation 'Hardswish'"),
    (lambda d: d["modules"][0].update(pooling_mode=["median"]), "pooling mode 'median'"),
    (lambda d: d.update(version=99), "stack of version 99"),
    (lambda d: d.update(similarity_fn_name="angle"), "similarity function 'angle'"),
])
def test_a_recorded_stack_this_runtime_cannot_compute_is_refused(edit, message):
    stack = SentenceStack((Pooling(), Dense(32, 8, True, "Tanh", "2_Dense/model.safetensors"),
                           Normalize()))
    data = stack.to_json()
    edit(data)
    with pytest.raises(ArtifactError, match=f"records .*{message}.*which this bertonnx cannot "
                                            "compute — upgrade bertonnx"):
        SentenceStack.from_json(data, "bertonnx.json")
    with pytest.raises(ArtifactError, match="damaged sentence-transformers record"):
        SentenceStack.from_json({"modules": [{"type": "Pooling"}]}, "bertonnx.json")


def test_other_encoders_folders_are_not_embedders(tmp_path):
    write(tmp_path / "ce", {"modules.json": listing(V5 + "transformer.Transformer"),
                            "config_sentence_transformers.json": {"model_type": "CrossEncoder"}})
    sparse = listing("sentence_transformers.sparse_encoder.modules.MLMTransformer",
                     "sentence_transformers.sparse_encoder.modules.SpladePooling")
    write(tmp_path / "sparse", {"modules.json": sparse})
    assert folder_task(tmp_path / "ce") is folder_task(tmp_path / "sparse") is None
    assert folder_task(tmp_path) is None and read_folder(tmp_path) is None


MODES = [*POOLING_MODES, "cls+mean", "max+mean_sqrt_len_tokens+lasttoken"]


@pytest.mark.parametrize("modes", MODES)
@pytest.mark.parametrize("prompt_length", [0, 3])
def test_pooling_equals_sentence_transformers(modes, prompt_length):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 9, 6, generator=g)
    lengths = torch.tensor([9, 5, 3, 1])       # right padding; the last row shorter than a prompt
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    st = STPooling(6, pooling_mode=tuple(modes.split("+")), include_prompt=not prompt_length)
    features = {"token_embeddings": hidden, "attention_mask": mask}
    if prompt_length:
        features["prompt_length"] = prompt_length
    want = st(features)["sentence_embedding"].numpy()
    ours = Pooling(tuple(modes.split("+")), include_prompt=not prompt_length)
    got = {"token_embeddings": hidden.numpy(), "attention_mask": mask.numpy()}
    ours.apply(got, ours.modes, prompt_length)
    np.testing.assert_allclose(got["sentence_embedding"], want, rtol=0, atol=1e-6)
    if not prompt_length and "+" not in modes:
        np.testing.assert_allclose(pool(hidden.numpy(), mask.numpy(), modes), want, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_equal_torch(name):
    x = torch.linspace(-30, 30, 2001, dtype=torch.float64)
    want = getattr(torch.nn, name)()(x).numpy()
    np.testing.assert_allclose(ACTIVATIONS[name](x.numpy()), want, rtol=1e-12, atol=1e-15)


def test_safetensors_reader(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    save_file({"a": x, "b": x.astype(np.float16), "c": x.astype(np.float64)},
              str(tmp_path / "w.safetensors"))
    got = read_safetensors(tmp_path / "w.safetensors")
    np.testing.assert_array_equal(got["a"], x)
    np.testing.assert_allclose(got["b"], x, atol=1e-3)
    # bfloat16 (no numpy dtype, so torch's writer): the top half of each float32
    save_torch({"w": torch.from_numpy(x).bfloat16()},
                                str(tmp_path / "bf.safetensors"))
    np.testing.assert_array_equal(read_safetensors(tmp_path / "bf.safetensors")["w"],
                                  torch.from_numpy(x).bfloat16().float().numpy())
    (tmp_path / "bad.safetensors").write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{]}")
    with pytest.raises(ArtifactError, match="is not a safetensors file"):
        read_safetensors(tmp_path / "bad.safetensors")
