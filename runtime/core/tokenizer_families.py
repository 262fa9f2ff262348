"""How transformers' fast tokenizer classes read a folder, per family, on the `tokenizers` library.

A folder's backend comes from tokenizer.json, or from the slow files transformers converts in
pure Python (`convert_slow_tokenizer.BertConverter` for vocab.txt, `RobertaConverter` for
vocab.json + merges.txt). On top of it each class's `__init__` applies tokenizer_config.json:
the special tokens (with the class's defaults), added tokens missing from the backend, the
ByteLevel pre-tokenizer's add_prefix_space (`PreTrainedTokenizerFast`), the BERT normalizer
options (`BertTokenizerFast` and kin) and RoBERTa's post-processor options. Those rules are the
rows of `FAMILIES`, one per class (which class a model_type uses is its row's `tokenizer` in
families.py), and the functions below; the references are transformers 4.57's
tokenization_utils_fast.py, tokenization_utils_base.py (`_from_pretrained`) and the
models/*/tokenization_*_fast.py classes named in the rows.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import (AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                        processors)

from .errors import ArtifactError
from .families import FAMILIES as MODEL_FAMILIES

# transformers' SPECIAL_TOKENS_ATTRIBUTES order: the order missing specials are added in
SPECIAL_ATTRIBUTES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                      "cls_token", "mask_token")
_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")

_BERT = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
         "mask_token": "[MASK]"}
_ROBERTA = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>",
            "pad_token": "<pad>", "cls_token": "<s>", "mask_token": "<mask>"}
_MPNET = {**_ROBERTA, "unk_token": "[UNK]"}
_ALBERT = {"bos_token": "[CLS]", "eos_token": "[SEP]", "unk_token": "<unk>", "sep_token": "[SEP]",
           "pad_token": "<pad>", "cls_token": "[CLS]", "mask_token": "[MASK]"}
# BertTokenizerFast's keyword defaults, which win over tokenizer.json's normalizer
_BERT_NORMALIZER = {"do_lower_case": True, "strip_accents": None, "tokenize_chinese_chars": True}


@dataclass(frozen=True)
class Family:
    """One transformers tokenizer class: its defaults and the fixups its __init__ applies."""

    name: str                       # tokenizer_class without "Fast"
    specials: dict = field(hash=False)
    # flags the class gives a str mask_token (RoBERTa's "<mask>" eats the space before it)
    mask_flags: dict = field(default_factory=dict, hash=False)
    token_types: bool = True        # token_type_ids among the class's model_input_names
    bert_normalizer: bool = False   # do_lower_case / strip_accents / tokenize_chinese_chars win
    roberta_processor: bool = False  # add_prefix_space / trim_offsets win on the post-processor
    additional: tuple[str, ...] = ()  # default additional_special_tokens
    slow: str = "vocab.txt"         # the slow tokenizer's vocabulary file
    # flags the slow class gives a str special token (they reach the fast one it converts to)
    slow_flags: dict = field(default_factory=dict, hash=False)
    # the slow class's clean_up_tokenization_spaces default (the fast classes' is False)
    slow_cleanup: bool = False
    # flags the fast class itself gives every str special token, whichever files it reads
    # (MPNetTokenizerFast wraps each in AddedToken(lstrip=False, rstrip=False): normalized)
    str_flags: dict = field(default_factory=dict, hash=False)
    # tokenize_chinese_chars from tokenizer_config wins over the backend's (MPNetTokenizerFast
    # re-applies only do_lower_case and strip_accents)
    chinese_option: bool = True
    pair_seps: int = 1              # separators between a pair's two texts (MPNet: </s></s>)

    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "token_type_ids", "attention_mask"] if self.token_types else [
            "input_ids", "attention_mask"]


_LSTRIP = {"lstrip": True, "rstrip": False, "normalized": False}
FAMILIES = (
    Family("BertTokenizer", _BERT, bert_normalizer=True, slow_cleanup=True),
    Family("DistilBertTokenizer", _BERT, token_types=False, bert_normalizer=True,
           slow_cleanup=True),
    Family("ElectraTokenizer", _BERT, bert_normalizer=True, slow_cleanup=True),
    Family("RobertaTokenizer", _ROBERTA, _LSTRIP, token_types=False,
           roberta_processor=True, slow="vocab.json",
           slow_flags={"lstrip": False, "rstrip": False, "normalized": True}),
    # XLMRobertaTokenizerFast wraps the mask as AddedToken(lstrip=True): normalized stays True
    Family("XLMRobertaTokenizer", _ROBERTA,
           {"lstrip": True, "rstrip": False, "normalized": True}, token_types=False,
           slow="sentencepiece.bpe.model"),
    Family("CamembertTokenizer", _ROBERTA, {"lstrip": True, "normalized": False},
           token_types=False, additional=("<s>NOTUSED", "</s>NOTUSED", "<unk>NOTUSED"),
           slow="sentencepiece.bpe.model"),
    Family("AlbertTokenizer", _ALBERT, _LSTRIP, slow="spiece.model"),
    # SentencePiece Unigram, [CLS] A [SEP] B [SEP] with token types (DebertaV2Converter)
    Family("DebertaV2Tokenizer", {**_ALBERT, "unk_token": "[UNK]", "pad_token": "[PAD]"},
           slow="spm.model"),
    # WordPiece with RoBERTa's specials (but [UNK]) and pairs (MPNetConverter)
    Family("MPNetTokenizer", _MPNET, {"lstrip": True, "rstrip": False, "normalized": True},
           token_types=False, bert_normalizer=True, slow_cleanup=True,
           str_flags={"lstrip": False, "rstrip": False, "normalized": True},
           chinese_option=False, pair_seps=2),
    # the base class (ModernBERT's): no special tokens of its own, tokenizer.json only
    Family("PreTrainedTokenizer", {}),
)
_BY_NAME = {f.name: f for f in FAMILIES}
# a folder that names no known class: guess from what the backend is (or the slow file it has)
_BY_MODEL = {"WordPiece": "BertTokenizer", "BPE": "RobertaTokenizer",
             "vocab.txt": "BertTokenizer", "vocab.json": "RobertaTokenizer",
             "spiece.model": "AlbertTokenizer", "sentencepiece.bpe.model": "XLMRobertaTokenizer",
             "spm.model": "DebertaV2Tokenizer"}
SPM_FILES = ("spiece.model", "sentencepiece.bpe.model", "spm.model")
SLOW_FILES = ("vocab.txt", "vocab.json", *SPM_FILES)


def declared_family(folder: Path, cfg: dict, read_json) -> Family | None:
    """The class AutoTokenizer would pick: tokenizer_class, else config.json's model_type."""
    name = cfg.get("tokenizer_class")
    if isinstance(name, str) and name.removesuffix("Fast") in _BY_NAME:
        return _BY_NAME[name.removesuffix("Fast")]
    if name is None:  # AutoTokenizer's mapping, as the model_type's row names it
        model_type = read_json(folder / "config.json").get("model_type")
        row = MODEL_FAMILIES.get(model_type) if isinstance(model_type, str) else None
        return None if row is None else _BY_NAME[row.tokenizer]
    return None  # a class bertonnx does not know: the backend alone decides, nothing is fixed


def slow_file(family: Family | None, files) -> str | None:
    """The slow vocabulary file to convert: the class's own first, else any the folder has."""
    order = SLOW_FILES if family is None else (family.slow, *SLOW_FILES)
    return next((n for n in order if n in files), None)


def guessed_family(kind: str, has_cls: bool) -> Family:
    """A family for the defaults when the folder names none (`kind`: backend model or file)."""
    if kind == "Unigram":
        return _BY_NAME["AlbertTokenizer" if has_cls else "XLMRobertaTokenizer"]
    return _BY_NAME[_BY_MODEL.get(kind, "BertTokenizer")]


# --- special and added tokens -------------------------------------------------------------------

def _token(value, flags: dict | None = None) -> AddedToken | None:
    """A str or a saved AddedToken dict as an AddedToken; a bare str gets `flags`, by default
    those the base class gives a special str (special, so not normalized)."""
    if value is None:
        return None
    if isinstance(value, dict):
        if not isinstance(value.get("content"), str):
            raise ArtifactError(f"a saved token has no content: {value}",
                                "restore tokenizer_config.json / special_tokens_map.json")
        return AddedToken(value["content"], **{k: bool(value[k]) for k in _FLAGS if k in value})
    return AddedToken(str(value), **(flags or {"special": True}))


def special_tokens(family: Family, cfg: dict, special_map: dict, slow: bool = False) -> dict:
    """attribute -> AddedToken | None, as `_from_pretrained` + the class __init__ settle them.

    tokenizer_config.json's values win over the class defaults; special_tokens_map.json is read
    only by the legacy path (a config without added_tokens_decoder), where it wins over both.
    `slow`: built from the slow files, whose class wraps str tokens its own way.
    """
    values = {a: family.specials.get(a) for a in SPECIAL_ATTRIBUTES}
    values.update({a: cfg[a] for a in SPECIAL_ATTRIBUTES if a in cfg})
    extra = list(cfg.get("additional_special_tokens", family.additional) or [])
    if "added_tokens_decoder" not in cfg:
        legacy = {k: {**v, "special": True} if isinstance(v, dict) else v
                  for k, v in special_map.items()}
        values.update({a: legacy[a] for a in SPECIAL_ATTRIBUTES if a in legacy})
        extra += [t for t in legacy.get("additional_special_tokens") or [] if t not in extra]
    plain = family.str_flags or ((family.slow_flags or None) if slow else None)
    out = {a: _token(v, family.mask_flags if a == "mask_token" else plain)
           for a, v in values.items()}
    out["additional_special_tokens"] = [_token(t) for t in extra]
    return out


def add_missing_tokens(backend: Tokenizer, cfg: dict, specials: dict,
                       legacy_added: dict) -> None:
    """Add what `PreTrainedTokenizerFast.__init__` adds: tokenizer_config's added_tokens_decoder
    (else the legacy added_tokens.json) entries the backend lacks, in id order, then every
    special token still missing (a new id past the vocabulary when it is not in it)."""
    special = [t for a in SPECIAL_ATTRIBUTES if (t := specials[a]) is not None]
    special += specials["additional_special_tokens"]
    names = {t.content for t in special}
    decoder = cfg.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        ids = {k: int(k) if str(k).isdigit() else -1 for k in decoder}
        if -1 in ids.values():
            raise ArtifactError("tokenizer_config.json's added_tokens_decoder has a key that is "
                                "not a token id", "restore the file")
        entries = [_token(decoder[k]) for k in sorted(decoder, key=ids.get)]
    else:  # legacy: added_tokens.json maps token -> id; normalized unless special
        if not all(isinstance(i, int) for i in legacy_added.values()):
            raise ArtifactError("added_tokens.json maps a token to something not an id",
                                "restore the file")
        entries = [AddedToken(t, normalized=t not in names, special=t in names)
                   for t, _ in sorted(legacy_added.items(), key=lambda kv: kv[1])]
    # get_added_tokens_decoder holds only the added tokens: cheap, unlike get_vocab()
    have = {t.content for t in backend.get_added_tokens_decoder().values()}
    todo: list[AddedToken] = []
    for tok in [*entries, *special]:
        if tok.content not in have:
            tok.special = tok.special or tok.content in names
            todo.append(tok)
            have.add(tok.content)
    if todo:
        backend.add_tokens(todo)


# --- what tokenizer_config.json changes on the backend ------------------------------------------

def bert_normalizer(options: dict) -> normalizers.BertNormalizer:
    return normalizers.BertNormalizer(
        clean_text=options.get("clean_text", True),
        handle_chinese_chars=options.get("tokenize_chinese_chars", True),
        strip_accents=options.get("strip_accents"), lowercase=options.get("do_lower_case", True))


def apply_config(backend: Tokenizer, cfg: dict, family: Family | None) -> None:
    """tokenizer_config.json over the backend's own settings, as the classes' __init__ do.

    `family` None (a class bertonnx does not know) applies only the base class's rule."""
    pre = backend.pre_tokenizer
    want = bool(cfg.get("add_prefix_space", False))
    if isinstance(pre, pre_tokenizers.ByteLevel) and pre.add_prefix_space != want:
        pre.add_prefix_space = want
    if family is None:
        return
    norm = backend.normalizer
    if family.bert_normalizer and isinstance(norm, normalizers.BertNormalizer):
        # read off the backend, not by parsing tokenizer.json again (~25 ms of cold start)
        have = {"do_lower_case": norm.lowercase, "strip_accents": norm.strip_accents,
                "tokenize_chinese_chars": norm.handle_chinese_chars}
        options = {k: cfg.get(k, d) for k, d in _BERT_NORMALIZER.items()}
        if not family.chinese_option:
            options["tokenize_chinese_chars"] = have["tokenize_chinese_chars"]
        if options != have:
            backend.normalizer = bert_normalizer({**options, "clean_text": norm.clean_text})
    post = backend.post_processor
    if family.roberta_processor and post is not None:
        state = json.loads(post.__getstate__())
        options = {"add_prefix_space": want, "trim_offsets": bool(cfg.get("trim_offsets", True))}
        if any(k in state and state[k] != v for k, v in options.items()):
            state.update({k: v for k, v in options.items() if k in state})
            for k in ("sep", "cls"):
                if k in state:
                    state[k] = tuple(state[k])
            backend.post_processor = getattr(processors, state.pop("type"))(**state)


# --- backends from the slow files ---------------------------------------------------------------

def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{path} is not UTF-8 ({e.reason} at byte {e.start})",
                            f"restore the file ({what} files are UTF-8)") from e


def wordpiece_from_vocab(vocab_file: Path, cfg: dict, specials: dict,
                         pair_seps: int = 1) -> Tokenizer:
    """transformers' BertConverter on the slow BertTokenizer's vocab.txt (MPNetConverter's:
    `pair_seps` 2, two separators between a pair's texts)."""
    vocab: dict[str, int] = {}
    try:
        with open(vocab_file, encoding="utf-8") as f:
            for i, line in enumerate(f):  # lines as BertTokenizer's readlines() splits them
                vocab.setdefault(line.rstrip("\n"), i)
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{vocab_file} is not UTF-8 ({e.reason} at byte {e.start})",
                            "restore the file (BERT vocab files are UTF-8)") from e
    cls_, sep, unk = (str(specials[a]) for a in ("cls_token", "sep_token", "unk_token"))
    for tok in (cls_, sep, unk):
        if tok not in vocab:
            raise ArtifactError(f"{vocab_file} lacks the special token {tok}",
                                "use a BERT vocab.txt")
    backend = Tokenizer(models.WordPiece(vocab, unk_token=unk, max_input_chars_per_word=100))
    backend.normalizer = bert_normalizer({**_BERT_NORMALIZER, **cfg})
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    seps = " ".join([f"{sep}:0"] * pair_seps)
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls_}:0 $A:0 {sep}:0", pair=f"{cls_}:0 $A:0 {seps} $B:1 {sep}:1",
        special_tokens=[(cls_, vocab[cls_]), (sep, vocab[sep])])
    backend.decoder = decoders.WordPiece(prefix="##")
    return backend


def bpe_from_vocab(folder: Path, cfg: dict, specials: dict, legacy_added: dict) -> Tokenizer:
    """transformers' RobertaConverter on the slow RobertaTokenizer's vocab.json + merges.txt."""
    try:
        vocab = json.loads(_read_text(folder / "vocab.json", "BPE vocab"))
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{folder / 'vocab.json'} is not valid JSON ({e})",
                            "restore the file") from e
    if not (folder / "merges.txt").is_file():
        raise ArtifactError(f"{folder} has vocab.json but no merges.txt",
                            "copy merges.txt next to vocab.json, or add tokenizer.json")
    # RobertaTokenizer drops the first line (#version) and the last (after the final newline)
    lines = _read_text(folder / "merges.txt", "BPE merges").split("\n")[1:-1]
    merges = [tuple(line.split()) for line in lines]
    if any(len(m) != 2 for m in merges):
        raise ArtifactError(f"{folder / 'merges.txt'} has a line that is not one merge (a b)",
                            "restore the file")
    backend = Tokenizer(models.BPE(vocab, merges, dropout=None, continuing_subword_prefix="",
                                   end_of_word_suffix="", fuse_unk=False))
    prefix = bool(cfg.get("add_prefix_space", False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    backend.decoder = decoders.ByteLevel()
    # the post-processor needs the specials' ids, new ones included: add them first
    add_missing_tokens(backend, cfg, specials, legacy_added)
    sep, cls_ = str(specials["sep_token"]), str(specials["cls_token"])
    backend.post_processor = processors.RobertaProcessing(
        sep=(sep, backend.token_to_id(sep)), cls=(cls_, backend.token_to_id(cls_)),
        add_prefix_space=prefix, trim_offsets=bool(cfg.get("trim_offsets", True)))
    return backend


def from_slow_file(path: Path, cfg: dict, specials: dict, legacy_added: dict,
                   pair_seps: int = 1) -> Tokenizer:
    if path.name == "vocab.txt":
        return wordpiece_from_vocab(path, cfg, specials, pair_seps)
    if path.name == "vocab.json":
        return bpe_from_vocab(path.parent, cfg, specials, legacy_added)
    raise sentencepiece_needs_tokenizer_json(path.parent, path.name)


def sentencepiece_needs_tokenizer_json(folder: Path, name: str) -> ArtifactError:
    """Converting a SentencePiece model needs the sentencepiece package (and protobuf), which
    the runtime does not depend on: transformers writes tokenizer.json once, elsewhere."""
    return ArtifactError(
        f"{folder} has {name} but no tokenizer.json, and bertonnx reads SentencePiece models "
        "only as tokenizer.json",
        "write it once where transformers and sentencepiece are installed: python -c "
        "\"from transformers import AutoTokenizer as T; "
        f"T.from_pretrained('{folder}').save_pretrained('{folder}')\"")
