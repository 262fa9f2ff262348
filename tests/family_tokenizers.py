"""Tiny tokenizers of every family, as transformers' converters build them
(convert_slow_tokenizer.py), trained here in about a second with the `tokenizers` library.

Byte-level BPE (RoBERTa), Unigram with `▁` (XLM-R, CamemBERT, ALBERT, DeBERTa-v2) and WordPiece (BERT,
DistilBERT, ELECTRA; MPNet's with RoBERTa's specials). `fast_tokenizer(model_type)` wraps one in the family's transformers fast
class (built once per process); tests/conftest.py's make_checkpoint saves it beside a model.
"""
from __future__ import annotations

import functools

import transformers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from tokenizers.implementations import ByteLevelBPETokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog.", "Paris is the capital of France.",
    "The cat sat on the mat, and the dog sat on the rug.", "Hello, world! Don't stop believing.",
    "Café crème brûlée, naïve façade: Zürich, São Paulo, Ångström.", "北京欢迎你 and 東京 too",
    "She sells sea shells by the sea shore; they're really nice.", "ÀÉÎÕÜ àéîõü ñ ç ß ø",
    "What is the capital of Germany? Berlin is the capital of Germany.", "100% of $9 is 9 dollars",
    "Mixed CASE words Like iPhone and McDonald's", "emoji 🙂 and ☃ snow", "\"quoted\" ``text'' here",
] * 8
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


# --- tiny tokenizers as transformers' converters build them -----------------------------------

def bpe() -> Tokenizer:
    """RoBERTa: byte-level BPE, RobertaProcessing (RobertaConverter)."""
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(CORPUS, vocab_size=400, min_frequency=2,
                                special_tokens=ROBERTA_SPECIALS, show_progress=False)
    tok = trainer._tokenizer
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok


def unigram(specials: list[str], norm: list, single: str, pair: str, cls_sep: tuple,
            unk: str = "<unk>") -> Tokenizer:
    """A SentencePiece Unigram model with `▁` (SpmConverter and the family's subclass)."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(
        vocab_size=250, special_tokens=specials, unk_token=unk, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in cls_sep])
    return tok


# NFKC stands in for the real models' precompiled nmt_nfkc charsmap
SPM_NORM = [normalizers.NFKC(), normalizers.Strip(left=False, right=True),
            normalizers.Replace(Regex(" {2,}"), "▁")]
ALBERT_NORM = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(),
               normalizers.StripAccents(), normalizers.Lowercase(), normalizers.NFKC(),
               normalizers.Replace(Regex(" {2,}"), " ")]


# DebertaV2Converter: Strip, the charsmap, runs of spaces to one
DEBERTA_NORM = [normalizers.Strip(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]


def deberta() -> Tokenizer:
    """DeBERTa-v2/v3: [PAD] [CLS] [SEP] [UNK] first as in deberta-v3's spm.model, [MASK] after,
    [CLS] A [SEP] B [SEP] with token types."""
    return unigram(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], DEBERTA_NORM,
                   "[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", ("[CLS]", "[SEP]"),
                   unk="[UNK]")


def xlmr() -> Tokenizer:
    return unigram(ROBERTA_SPECIALS, SPM_NORM, "<s> $A </s>", "<s> $A </s> </s> $B </s>",
                   ("<s>", "</s>"))


def camembert() -> Tokenizer:
    specials = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>",
                "<mask>"]
    return unigram(specials, SPM_NORM, "<s> $A </s>", "<s> $A </s> </s> $B </s>",
                   ("<s>", "</s>"))


def albert() -> Tokenizer:
    return unigram(["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], ALBERT_NORM,
                   "[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", ("[CLS]", "[SEP]"))


def wordpiece(lower: bool) -> Tokenizer:
    """BertConverter's pipeline on a trained WordPiece vocabulary."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lower)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def mpnet() -> Tokenizer:
    """MPNetConverter: BERT's lower-cased WordPiece pipeline with RoBERTa's specials (but
    [UNK]), <pad> at 1 as MPNet's embeddings assume, and <s> A </s></s> B </s> pairs."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "[UNK]", "<mask>"],
        show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="<s>:0 $A:0 </s>:0", pair="<s>:0 $A:0 </s>:0 </s>:0 $B:1 </s>:1",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok


MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def modernbert() -> Tokenizer:
    """ModernBERT's tokenizer.json: byte-level BPE with BERT's specials ([PAD] 3 here, so a
    loader that pads with 0 cannot pass), [MASK] eating the space before it (lstrip), and
    [CLS] A [SEP] B [SEP] with token types; read through the base PreTrainedTokenizerFast."""
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(CORPUS, vocab_size=400, min_frequency=2,
                                special_tokens=MODERNBERT_SPECIALS, show_progress=False)
    tok = trainer._tokenizer
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return tok


# name -> (transformers class, its backend, its keyword arguments)
FAMILIES = {
    "roberta": ("RobertaTokenizerFast", bpe, {}),
    "xlm-roberta": ("XLMRobertaTokenizerFast", xlmr, {}),
    "camembert": ("CamembertTokenizerFast", camembert, {}),
    "albert": ("AlbertTokenizerFast", albert, {}),
    "bert": ("BertTokenizerFast", lambda: wordpiece(False), {"do_lower_case": False}),
    "distilbert": ("DistilBertTokenizerFast", lambda: wordpiece(True), {}),
    "electra": ("ElectraTokenizerFast", lambda: wordpiece(True), {"strip_accents": False}),
    "mpnet": ("MPNetTokenizerFast", mpnet, {}),
    "deberta-v2": ("DebertaV2TokenizerFast", deberta, {}),
    "modernbert": ("PreTrainedTokenizerFast", modernbert, dict(
        {f"{t[1:-1].lower()}_token": t for t in MODERNBERT_SPECIALS},
        model_input_names=["input_ids", "attention_mask"], clean_up_tokenization_spaces=True,
        model_max_length=8192)),
}


@functools.cache
def _backend(model_type: str) -> str:
    return FAMILIES[model_type][1]().to_str()


def fast_tokenizer(model_type: str):
    """A fresh transformers fast tokenizer of the family (its trained backend is cached)."""
    cls_name, _, kwargs = FAMILIES[model_type]
    backend = Tokenizer.from_str(_backend(model_type))
    return getattr(transformers, cls_name)(tokenizer_object=backend, **kwargs)
