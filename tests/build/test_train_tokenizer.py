"""`train-tokenizer`: the folder it writes reads the same in transformers and in bertonnx."""
from __future__ import annotations

import pytest
from transformers import BertTokenizer, BertTokenizerFast

from bertonnx.build.train import TokenizerConfig, train_tokenizer
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tokenizer import load_tokenizer

from ._corpus import make_corpus

TEXTS = ["The cat sat on the mat.", "A MAN walked to Paris!", "the dog's happy-ish river",
         "Café naïve — unseenword", ""]


@pytest.mark.parametrize("cased", [False, True])
def test_transformers_and_bertonnx_agree(tmp_path, cased):
    corpus = make_corpus(tmp_path / "c.txt")
    out = train_tokenizer(TokenizerConfig(corpus=(corpus,), out=tmp_path / "tok", vocab_size=100,
                                          cased=cased, min_frequency=1))
    assert {p.name for p in out.iterdir()} >= {"tokenizer.json", "vocab.txt",
                                               "tokenizer_config.json"}
    fast, slow, ours = (BertTokenizerFast.from_pretrained(out), BertTokenizer.from_pretrained(out),
                        load_tokenizer(out))
    assert ours.vocab_size == fast.vocab_size == 100
    for text in TEXTS:
        ref = fast(text)
        assert ours.encode(text).ids == ref["input_ids"] == slow(text)["input_ids"]
        pair = fast(text, "the house")
        e = ours.encode(text, "the house")
        assert (e.ids, e.type_ids) == (pair["input_ids"], pair["token_type_ids"])
    # uncased folds "CAT" onto the vocabulary's "cat"; cased keeps it apart
    assert (ours.encode("CAT").ids == ours.encode("cat").ids) == (not cased)
    assert fast.mask_token_id == ours.mask_token_id == 4


def test_cli_writes_and_rejects_empty(tmp_path, capsys):
    corpus = make_corpus(tmp_path / "c.txt")
    assert main(["train-tokenizer", str(corpus), "--vocab-size", "90", "--out",
                 str(tmp_path / "t")]) == 0
    assert load_tokenizer(tmp_path / "t").vocab_size == 90
    empty = tmp_path / "e.txt"
    empty.write_text("\n\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["train-tokenizer", str(empty), "--out", str(tmp_path / "t2")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no text" in err
    assert not (tmp_path / "t2").exists()
    with pytest.raises(InputError, match="does not exist"):
        train_tokenizer(TokenizerConfig(corpus=(tmp_path / "nope.txt",), out=tmp_path / "t3"))
