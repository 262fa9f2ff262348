"""load_tokenizer vs transformers' fast tokenizers, family by family, on tokenizers trained here.

Byte-level BPE (RoBERTa), Unigram with `▁` (XLM-R, CamemBERT, ALBERT) and WordPiece (BERT,
DistilBERT, ELECTRA) are trained with the `tokenizers` library and given the normalizer,
pre-tokenizer and post-processor transformers' converters give each family
(convert_slow_tokenizer.py), wrapped in the family's fast class and saved with save_pretrained.
Each folder — and its variants: slow files only, tokenizer_config.json overriding tokenizer.json,
no tokenizer_config.json at all (the class defaults, found from config.json's model_type), the
legacy added_tokens.json — must give the ids, type ids, attention mask, offsets and tokens of
`transformers.AutoTokenizer` on the same folder, and the same special and added tokens.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import transformers

from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.tokenizer import TOKENIZER_FILES, load_tokenizer

from tests.family_tokenizers import FAMILIES

TEXTS = [
    "", " ", "   ", "Hello, world!", "hello world", "HELLO   WORLD", " Hello world  ",
    "The café's crème brûlée costs €5.50 — naïve?", "ÀÉÎÕÜ àéîõü Ångström São Paulo Zürich",
    "北京欢迎你 and 東京", "混合text中文", "emoji 🙂👍🏽 and ☃ snow",
    "multiple   spaces\tand\ttabs\nnewlines", "don't stop-believing (really); ok: [yes] {no} @u #t",
    "ﬁnancial ligature and ①②③ fullwidth ＡＢＣ", "control\x00chars\x07here\u200b zero width",
    "``quoted'' text", "unseen Ω ж ☂ 🚀 chars", "x" * 120,
    "Paris is the capital of {mask}.", "{mask} starts, ends {mask}", "a{mask}b  {mask}",
]
PAIRS = [("What is the capital?", "Paris is the capital of France."), ("", "only second"),
         ("héllo  wörld", "  中文 text "), ("The {mask} sat.", "On the mat."), (" ", " ")]
SPECIAL_NAMES = ("cls_token", "sep_token", "pad_token", "mask_token", "unk_token")


MODEL_TYPE = {"roberta": "roberta", "xlm-roberta": "xlm-roberta", "camembert": "camembert",
              "albert": "albert", "bert": "bert", "distilbert": "distilbert", "electra": "electra",
              "deberta-v2": "deberta-v2", "modernbert": "modernbert", "mpnet": "mpnet"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> a folder save_pretrained wrote for that family (built once per module)."""
    root, made = tmp_path_factory.mktemp("families"), {}

    def get(name: str) -> Path:
        if name not in made:
            cls_name, backend, kwargs = FAMILIES[name]
            fast = getattr(transformers, cls_name)(tokenizer_object=backend(), **kwargs)
            fast.save_pretrained(root / name)
            made[name] = root / name
        return made[name]

    return get


def variant(src: Path, dst: Path, *, drop=(), config=None, model_type=None) -> Path:
    """A copy of `src` without the files in `drop`, tokenizer_config.json updated by `config`."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in drop:
            shutil.copy(f, dst / f.name)
    if config:
        path = dst / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}), encoding="utf-8")
    if model_type:
        (dst / "config.json").write_text(json.dumps({"model_type": model_type}), encoding="utf-8")
    return dst


# --- the comparison ------------------------------------------------------------------------------

def compare(folder: Path, expect_class: str):
    ours = load_tokenizer(folder)
    ref = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(ref).__name__ == expect_class  # the reference is the family's own class
    assert ours.family == expect_class.removesuffix("Fast")
    mask = ref.mask_token
    texts = [t.replace("{mask}", mask) for t in TEXTS]
    pairs = [(a.replace("{mask}", mask), b.replace("{mask}", mask)) for a, b in PAIRS]
    kw = {"return_offsets_mapping": True, "return_token_type_ids": True,
          "return_attention_mask": True}
    for text, pair in [(t, None) for t in texts] + pairs:
        got, want = ours.encode(text, pair), ref(text, pair, **kw)
        case = (text, pair)
        assert got.ids == want["input_ids"], case
        assert got.tokens == want.tokens(), case
        assert got.type_ids == want["token_type_ids"], case
        assert got.attention_mask == want["attention_mask"], case
        assert [tuple(o) for o in got.offsets] == [tuple(o) for o in want["offset_mapping"]], case
        assert ours.decode(got.ids) == ref.decode(want["input_ids"], skip_special_tokens=True,
                                                  clean_up_tokenization_spaces=False), case
        assert ours.decode(got.ids, skip_special_tokens=False) == ref.decode(
            want["input_ids"], clean_up_tokenization_spaces=False), case
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    batch = ours.encode_batch(firsts + texts[:3], seconds + [None] * 3)  # pairs and singles
    want = ref(firsts, seconds)["input_ids"] + ref(texts[:3])["input_ids"]
    assert [e.ids for e in batch] == want
    for name in SPECIAL_NAMES:
        assert getattr(ours, name) == getattr(ref, name), name
        assert getattr(ours, f"{name}_id") == getattr(ref, f"{name}_id"), name
    assert ours.vocab_size == len(ref)
    assert ours.model_input_names == ref.model_input_names
    assert ours.clean_up_tokenization_spaces == ref.clean_up_tokenization_spaces
    for pair in (False, True):
        assert ours.num_special_tokens_to_add(pair) == ref.num_special_tokens_to_add(pair=pair)
    # transformers' NER: a model prefix means real sub-words, none means the space heuristic
    assert bool(ours.continuing_subword_prefix) == bool(getattr(
        ref.backend_tokenizer.model, "continuing_subword_prefix", None))
    assert ours.model_max_length is None or ours.model_max_length == ref.model_max_length
    added = ref.backend_tokenizer.get_added_tokens_decoder()
    assert {i: repr(t) for i, t in ours.backend.get_added_tokens_decoder().items()} == {
        i: repr(t) for i, t in added.items()}  # ids, texts and flags (lstrip, normalized...)
    enc = ours.encode(texts[7], pairs[0][0])
    for tok, i in zip(enc.tokens, enc.ids):
        if i != ours.unk_token_id:  # an unknown piece's token is its text, which has no id
            assert ours.token_to_id(tok) == i == ref.convert_tokens_to_ids(tok)
            assert ours.id_to_token(i) == ref.convert_ids_to_tokens(i)
    # the mask token's text is the mask id, wherever it stands (RoBERTa's eats the space before)
    for text in texts[-3:]:
        assert ours.encode(text).ids.count(ours.mask_token_id) == text.count(mask), text
    return ours


@pytest.mark.parametrize("name", list(FAMILIES))
def test_saved_folder(saved, name):
    ours = compare(saved(name), FAMILIES[name][0])
    marker = {"roberta": "Ġ", "xlm-roberta": "▁", "camembert": "▁", "albert": "▁",
              "deberta-v2": "▁", "modernbert": "Ġ"}.get(name, "##")
    assert (ours.continuing_subword_prefix == "##") == (marker == "##")
    tokens = [t for text in TEXTS for t in ours.encode(text).tokens]
    assert any(marker in t for t in tokens)  # the space / continuation markers are exercised
    # byte-level BPE has no unknown: every byte is in its alphabet
    assert (ours.unk_token_id in ours.encode("unseen Ω ж ☂").ids) != (
        name in ("roberta", "modernbert"))


@pytest.mark.parametrize("name", ["bert", "distilbert", "electra", "mpnet"])
def test_wordpiece_from_vocab_txt(saved, tmp_path, name):
    folder = variant(saved(name), tmp_path / name, drop=("tokenizer.json",))
    assert (folder / "vocab.txt").is_file()
    compare(folder, FAMILIES[name][0])


@pytest.mark.parametrize("config", [{}, {"add_prefix_space": True},
                                    {"add_prefix_space": True, "trim_offsets": False}])
def test_roberta_from_vocab_json_and_merges(saved, tmp_path, config):
    folder = variant(saved("roberta"), tmp_path / "slow", drop=("tokenizer.json",), config=config)
    assert {"vocab.json", "merges.txt"} <= {f.name for f in folder.iterdir()}
    ours = compare(folder, "RobertaTokenizerFast")
    ours.save(tmp_path / "copy")  # tokenizer.json written from the converted backend
    again = load_tokenizer(tmp_path / "copy")
    assert (tmp_path / "copy" / "tokenizer.json").is_file()
    assert all(again.encode(t).offsets == ours.encode(t).offsets for t in TEXTS)


@pytest.mark.parametrize("config", [{"add_prefix_space": True},
                                    {"add_prefix_space": True, "trim_offsets": False}])
def test_roberta_config_overrides_tokenizer_json(saved, tmp_path, config):
    # tokenizer.json says no prefix space and trimmed offsets; tokenizer_config.json wins, as in
    # PreTrainedTokenizerFast.__init__ (pre-tokenizer) and RobertaTokenizerFast's (processor)
    folder = variant(saved("roberta"), tmp_path / "override", config=config)
    ours = compare(folder, "RobertaTokenizerFast")
    assert ours.encode("Hello").ids != load_tokenizer(saved("roberta")).encode("Hello").ids


# ModernBERT's class is the base PreTrainedTokenizerFast, which has no special tokens of its
# own: without tokenizer_config.json its folder names no mask or padding token to compare
@pytest.mark.parametrize("name", [n for n in FAMILIES if n != "modernbert"])
def test_class_defaults_from_model_type(saved, tmp_path, name):
    # no tokenizer_config.json nor special_tokens_map.json: AutoTokenizer takes the class from
    # config.json's model_type and the special tokens from the class's defaults
    folder = variant(saved(name), tmp_path / name, model_type=MODEL_TYPE[name],
                     drop=("tokenizer_config.json", "special_tokens_map.json"))
    compare(folder, FAMILIES[name][0])


@pytest.mark.parametrize("name,config", [("bert", {"pad_token": "[UNK]"}),
                                         ("roberta", {"pad_token": "</s>", "unk_token": "<s>"}),
                                         ("albert", {"cls_token": "<unk>"})])
def test_config_special_tokens_win(saved, tmp_path, name, config):
    # tokenizer_config.json's special tokens over the class defaults (a pad token that is
    # another token is common; the CLS change reaches the attribute, not the post-processor)
    folder = variant(saved(name), tmp_path / name, config=config)
    ours = compare(folder, FAMILIES[name][0])
    assert all(getattr(ours, k) == v for k, v in config.items())


def test_roberta_slow_files_alone_take_class_defaults(saved, tmp_path):
    # vocab.json + merges.txt + config.json: the specials (and <mask>'s lstrip) from the class
    keep = {"vocab.json", "merges.txt"}
    folder = variant(saved("roberta"), tmp_path / "bare", model_type="roberta",
                     drop=[f.name for f in saved("roberta").iterdir() if f.name not in keep])
    ours = compare(folder, "RobertaTokenizerFast")
    assert ours.backend.get_added_tokens_decoder()[ours.mask_token_id].lstrip


def test_legacy_added_tokens_json(saved, tmp_path):
    # a config without added_tokens_decoder reads added_tokens.json and special_tokens_map.json
    # (which then wins over tokenizer_config.json), as transformers' legacy path does
    folder = variant(saved("roberta"), tmp_path / "legacy", drop=("tokenizer.json",))
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    del cfg["added_tokens_decoder"]
    cfg["unk_token"] = "<mask>"  # overridden by special_tokens_map.json's <unk>
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    vocab_size = len(json.loads((folder / "vocab.json").read_text()))
    (folder / "added_tokens.json").write_text(json.dumps({"<extra>": vocab_size}), "utf-8")
    ours = compare(folder, "RobertaTokenizerFast")
    assert ours.unk_token == "<unk>" and ours.token_to_id("<extra>") == vocab_size
    assert ours.encode("an <extra> token").ids.count(vocab_size) == 1


@pytest.mark.parametrize("name,spm", [("albert", "spiece.model"),
                                      ("xlm-roberta", "sentencepiece.bpe.model"),
                                      ("deberta-v2", "spm.model")])  # deberta-v3's hub files
def test_sentencepiece_model_alone_asks_for_tokenizer_json(saved, tmp_path, name, spm):
    folder = variant(saved(name), tmp_path / name, drop=("tokenizer.json",))
    (folder / spm).write_bytes(b"\x0a\x00")  # never parsed: the folder lacks tokenizer.json
    with pytest.raises(ArtifactError, match=rf"{spm} but no tokenizer\.json.*save_pretrained"):
        load_tokenizer(folder)


def test_tokenizer_files_cover_every_family(saved):
    # build/save.py and the export copy exactly TOKENIZER_FILES: every file a family's
    # save_pretrained writes (the slow files included) must be among them
    for name in FAMILIES:
        written = {f.name for f in saved(name).iterdir()}
        assert written <= set(TOKENIZER_FILES), (name, written - set(TOKENIZER_FILES))
    assert {"spiece.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt",
            "added_tokens.json"} <= set(TOKENIZER_FILES)
