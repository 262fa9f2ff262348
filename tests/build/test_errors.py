"""Every user mistake in build/ is one BertOnnxError subclass whose message names the file or key
and carries a fix; plus loading by hub id through a (monkeypatched or unreachable) hub."""
from __future__ import annotations

import json

import huggingface_hub
import pytest
import torch
import transformers
from huggingface_hub import constants
from safetensors.torch import load_file, save_file

from bertonnx.build import BertConfig, load_checkpoint, load_pretrained, load_tokenizer, preset
from bertonnx.runtime.core.errors import ArtifactError, BertOnnxError, ConfigError


def raises(exc_type, *needles):
    """Context manager: exc_type is raised, has a fix, and its message holds every needle."""
    class _Check:
        def __enter__(self):
            self.cm = pytest.raises(exc_type)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.cm.__exit__(*exc)
            err = self.info.value
            assert isinstance(err, BertOnnxError) and err.fix, err
            for needle in needles:
                assert str(needle) in str(err), (needle, str(err))
            assert "\n" not in str(err)  # one line for the CLI
            return handled
    return _Check()


def edit_config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def edit_weights(folder, edit):
    path = folder / "model.safetensors"
    state = load_file(path)
    edit(state)
    save_file(state, path, metadata={"format": "pt"})


def test_missing_folder(tmp_path):
    with raises(ArtifactError, tmp_path / "nope", "check the path"):
        load_pretrained(tmp_path / "nope", "fill-mask")


def test_file_instead_of_folder(tiny_hf_checkpoint):
    path = tiny_hf_checkpoint() / "config.json"
    with raises(ArtifactError, path, "folder"):
        load_pretrained(path, "fill-mask")


def test_missing_config(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    (folder / "config.json").unlink()
    with raises(ArtifactError, folder / "config.json"):
        load_pretrained(folder, "fill-mask")


def test_config_not_json(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    (folder / "config.json").write_text("{not json")
    with raises(ArtifactError, folder / "config.json", "not valid JSON"):
        load_pretrained(folder, "fill-mask")


def test_unsupported_family_is_refused_naming_the_supported_ones(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    edit_config(folder, model_type="deberta")  # DeBERTa v1 (v2/v3 have a row)
    with raises(ConfigError, "deberta", folder / "config.json", "not supported",
                "bert, roberta, xlm-roberta, camembert, distilbert, electra, albert"):
        load_pretrained(folder, "fill-mask")


def test_relative_position_embeddings_refused(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    edit_config(folder, position_embedding_type="relative_key")
    with raises(ConfigError, "relative_key", "absolute"):
        load_pretrained(folder, "fill-mask")


def test_unknown_activation(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    edit_config(folder, hidden_act="mish")
    with raises(ConfigError, "mish", folder / "config.json", "gelu_new"):
        load_pretrained(folder, "fill-mask")


def test_shape_mismatch_names_the_key(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    edit_config(folder, intermediate_size=38)  # the weights say 37
    with raises(ArtifactError, "bert.encoder.layer.0.intermediate.dense.", "(38", "(37",
                "config.json"):
        load_pretrained(folder, "fill-mask")


def test_unknown_extra_key(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    key = "bert.encoder.layer.1.attention.self.rotary.inv_freq"
    edit_weights(folder, lambda s: s.__setitem__(key, torch.zeros(4)))
    with raises(ArtifactError, key, "BERT checkpoint"):
        load_pretrained(folder, "fill-mask")


def test_missing_encoder_weight(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    key = "bert.encoder.layer.1.output.LayerNorm.weight"
    edit_weights(folder, lambda s: s.pop(key))
    with raises(ArtifactError, key, "incomplete"):
        load_pretrained(folder, "fill-mask")


def test_no_weights(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    (folder / "model.safetensors").unlink()
    with raises(ArtifactError, folder, "model.safetensors"):
        load_pretrained(folder, "fill-mask")


def test_corrupt_safetensors(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    with raises(ArtifactError, folder / "model.safetensors", "re-download"):
        load_pretrained(folder, "fill-mask")


def test_missing_shard(tiny_hf_checkpoint, tmp_path):
    src = tiny_hf_checkpoint()
    out = tmp_path / "sharded"
    transformers.BertForMaskedLM.from_pretrained(src).save_pretrained(out, max_shard_size="20KB")
    shard = sorted(out.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with raises(ArtifactError, shard.name, "model.safetensors.index.json"):
        load_pretrained(out, "fill-mask")


def test_pickle_with_code_is_refused(tiny_hf_checkpoint):
    # weights_only=True: a .bin that would run code on unpickling is rejected, not executed.
    folder = tiny_hf_checkpoint()
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({**state, "evil": torch.nn.Linear(2, 2)}, folder / "pytorch_model.bin")
    with raises(ArtifactError, folder / "pytorch_model.bin", "run code", "safetensors"):
        load_pretrained(folder, "fill-mask")


def test_unknown_task(tiny_hf_checkpoint):
    with raises(ConfigError, "summarization", "fill-mask"):
        load_pretrained(tiny_hf_checkpoint(), "summarization")


def test_unknown_preset():
    with raises(ConfigError, "huge", "tiny"):
        preset("huge")


def test_config_errors():
    with raises(ConfigError, "num_attention_heads 5"):
        BertConfig(hidden_size=32, num_attention_heads=5)
    with raises(ConfigError, "'tanh'", "gelu"):
        BertConfig(hidden_act="tanh")
    with raises(ConfigError, "problem_type", "regression"):
        BertConfig(problem_type="ranking")
    with raises(ConfigError, "id2label"):
        BertConfig(id2label={0: "a", 2: "b"})


def test_malformed_config_field(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint()
    edit_config(folder, id2label=["a", "b"])
    with raises(ConfigError, folder / "config.json", "malformed"):
        load_pretrained(folder, "text-classification")


def test_tokenizer_errors(tmp_path):
    with raises(ArtifactError, tmp_path / "none"):
        load_tokenizer(tmp_path / "none")
    empty = tmp_path / "empty"
    empty.mkdir()
    with raises(ArtifactError, "vocab.txt", empty):
        load_tokenizer(empty)
    (empty / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    with raises(ArtifactError, "[CLS]", "vocab.txt"):
        load_tokenizer(empty)
    (empty / "tokenizer.json").write_text("{}")
    with raises(ArtifactError, "tokenizer.json"):
        load_tokenizer(empty)


# --- hub ids ---------------------------------------------------------------------------------

def test_hub_id_downloads_through_huggingface_hub(tiny_hf_checkpoint, monkeypatch):
    folder = tiny_hf_checkpoint("question-answering")
    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    loaded = load_checkpoint("someone/tiny-bert-qa", "question-answering")
    assert calls and calls[0][0] == "someone/tiny-bert-qa"
    patterns = calls[0][1]["allow_patterns"]
    assert "config.json" in patterns and "vocab.txt" in patterns
    assert loaded.source_dir == folder and loaded.head_initialised == []


def test_unreachable_hub_id(monkeypatch, tmp_path):
    # The real huggingface_hub code path against an endpoint that refuses connections and an
    # empty cache: what an offline user with a typo or no network sees.
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # whatever the caller's is
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with raises(ArtifactError, "someone/not-here", "network"):
        load_pretrained("someone/not-here", "fill-mask")


def test_damaged_shard_index(tiny_hf_checkpoint, tmp_path):
    out = tmp_path / "sharded"
    transformers.BertForMaskedLM.from_pretrained(tiny_hf_checkpoint()).save_pretrained(
        out, max_shard_size="20KB")
    (out / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with raises(ArtifactError, "model.safetensors.index.json", "restore"):
        load_pretrained(out, "fill-mask")
