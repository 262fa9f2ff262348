"""load_tokenizer vs transformers' BertTokenizerFast on the same files: ids, type ids and offsets.

Folders: the real MiniLM (uncased, tokenizer.json), the same vocab without tokenizer.json
(vocab.txt + tokenizer_config.json only), and a small cased vocab built here, with and without
a tokenizer.json, with and without accent stripping / Chinese-character splitting.
"""
from __future__ import annotations

import json
import shutil

import pytest
import transformers

from bertonnx.build import load_tokenizer

from tests.conftest import VOCAB, write_vocab

TEXTS = [
    "", " ", "Hello, world!", "The café's crème brûlée costs €5.50 — naïve?",
    "ÀÉÎÕÜ àéîõü Ångström São Paulo Zürich", "北京欢迎你 and 東京", "混合text中文",
    "emoji 🙂👍🏽 and ☃ snow", "multiple   spaces\tand\ttabs\nnewlines",
    "don't stop-believing (really); ok: [yes] {no} <maybe> @user #tag 100% $9",
    "x" * 101, "a" * 100, "supercalifragilistic" * 6, "The Cat sat on THE mat.",
    "Paris is the capital of [MASK].", "control\x00chars\x07here\u200b and zero width",
    "ﬁnancial ligature and ①②③ fullwidth ＡＢＣ",
]
PAIRS = [("What is the capital?", "Paris is the capital of France."),
         ("", "only second"), ("héllo", "wörld 中")]

CASED_EXTRA = ["The", "Cat", "THE", "Paris", "France", "Hello", "São", "Paulo", "café", "crème",
               "brûlée", "naïve", "ÀÉÎÕÜ", "àéîõü", "北", "京", "中", "文", "🙂", "€", "##é",
               "##s", "e", "a", "x", "##x", "##a", "c", "##a", "##f", "##é"]


def compare(folder, texts=TEXTS, pairs=PAIRS):
    ours = load_tokenizer(folder)
    ref = transformers.BertTokenizerFast.from_pretrained(folder)
    for text in texts:
        got, want = ours.encode(text), ref(text, return_offsets_mapping=True)
        assert got.ids == want["input_ids"], text
        assert got.type_ids == want["token_type_ids"], text
        assert [tuple(o) for o in got.offsets] == [tuple(o) for o in want["offset_mapping"]], text
    for a, b in pairs:
        got, want = ours.encode(a, b), ref(a, b, return_offsets_mapping=True)
        assert got.ids == want["input_ids"], (a, b)
        assert got.type_ids == want["token_type_ids"], (a, b)
    batch = ours.encode_batch([a for a, _ in pairs], [b for _, b in pairs])
    assert [e.ids for e in batch] == ref([a for a, _ in pairs], [b for _, b in pairs])["input_ids"]
    assert ours.mask_token_id == ref.mask_token_id and ours.pad_token_id == ref.pad_token_id
    assert ours.vocab_size == len(ref)
    assert ours.clean_up_tokenization_spaces == ref.clean_up_tokenization_spaces
    return ours


def uses_unk(folder) -> bool:
    ours = load_tokenizer(folder)
    return any(ours.unk_token_id in ours.encode(t).ids for t in TEXTS)


@pytest.fixture
def cased_vocab(tmp_path):
    tokens = VOCAB + [t for t in dict.fromkeys(CASED_EXTRA) if t not in VOCAB]
    return write_vocab(tmp_path / "cased", tokens, lower=False)


@pytest.mark.slow
def test_minilm_tokenizer_json(minilm_dir):
    ours = compare(minilm_dir)
    assert ours.model_max_length == 512  # read from tokenizer_config.json


@pytest.mark.slow
def test_minilm_vocab_only(minilm_dir, tmp_path):
    folder = tmp_path / "vocab-only"
    folder.mkdir()
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, folder / name)
    compare(folder)


def test_tiny_uncased_vocab(tmp_path):
    folder = write_vocab(tmp_path / "uncased", VOCAB, lower=True)
    assert uses_unk(folder)  # the small vocab exercises [UNK] and ## continuation paths
    ours = compare(folder)
    assert ours.encode("The Cat sat").tokens == ["[CLS]", "the", "cat", "sat", "[SEP]"]


def test_cased_vocab_txt(cased_vocab):
    ours = compare(cased_vocab)
    assert "Cat" in ours.encode("The Cat sat").tokens


def test_cased_tokenizer_json(cased_vocab, tmp_path):
    # A tokenizer.json written by transformers itself, next to its tokenizer_config.json.
    folder = tmp_path / "cased-json"
    transformers.BertTokenizerFast.from_pretrained(cased_vocab).save_pretrained(folder)
    assert (folder / "tokenizer.json").is_file()
    compare(folder)


@pytest.mark.parametrize("options", [
    {"strip_accents": True}, {"strip_accents": False, "do_lower_case": True},
    {"tokenize_chinese_chars": False}])
def test_normalizer_options(cased_vocab, options):
    cfg_path = cased_vocab / "tokenizer_config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **options}))
    compare(cased_vocab)


def test_config_overrides_tokenizer_json(cased_vocab, tmp_path):
    # tokenizer.json says cased; tokenizer_config.json says lower case: the config wins, as in
    # BertTokenizerFast.__init__.
    folder = tmp_path / "override"
    transformers.BertTokenizerFast.from_pretrained(cased_vocab).save_pretrained(folder)
    cfg_path = folder / "tokenizer_config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "do_lower_case": True}))
    ours = compare(folder)
    assert "cat" in ours.encode("The Cat").tokens


def test_save_and_reload(cased_vocab, tmp_path):
    ours = load_tokenizer(cased_vocab)
    ours.save(tmp_path / "copy")
    again = load_tokenizer(tmp_path / "copy")
    assert (tmp_path / "copy" / "tokenizer.json").is_file()
    for text in TEXTS:
        assert again.encode(text).ids == ours.encode(text).ids


def test_decode_skips_specials(tmp_path):
    ours = load_tokenizer(write_vocab(tmp_path / "v"))
    assert ours.decode(ours.encode("the cats sat").ids) == "the cats sat"
