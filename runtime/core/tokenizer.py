"""The BERT family's tokenizers on the `tokenizers` library, with transformers' fast-class rules.

WordPiece (BERT, DistilBERT, ELECTRA), byte-level BPE (RoBERTa, `Ġ`) and SentencePiece Unigram
(ALBERT, XLM-R, CamemBERT, `▁`). From tokenizer.json when present, else from the slow files
transformers converts in pure Python: vocab.txt (`BertConverter`), vocab.json + merges.txt
(`RobertaConverter`). A SentencePiece model alone (spiece.model, sentencepiece.bpe.model) needs
the sentencepiece package to convert, which the runtime does not carry: that folder must hold
tokenizer.json, and the error says how to write it. tokenizer_config.json wins over the files as
in the classes' __init__ (tokenizer_families.py holds those rules, one row per class).
Torch-free: shared by build, export and runtime.
"""
from __future__ import annotations

import json

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from . import tokenizer_families as fam
from .defaults import resolve_checkpoint
from .errors import ArtifactError, InputError
from .files import read_json_object
from .schema import SPECIAL_TOKENS_MAP_RULES, TOKENIZER_CONFIG_RULES, check_values

# Every file a tokenizer may be read from: build/save.py, export and the benchmark copy by it.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", *fam.SPM_FILES)


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]
    offsets: list[tuple[int, int]]
    tokens: list[str]


def _read_json(path: Path) -> dict:
    return read_json_object(path, "restore the file") if path.is_file() else {}


def _backend_from_json(folder: Path, data: bytes) -> Tokenizer:
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:
        raise ArtifactError(f"{folder / 'tokenizer.json'} cannot be read ({e})",
                            "restore the file or remove it to use the vocabulary files") from e


class TextTokenizer:
    """A BERT-family tokenizer: `encode(text, pair)` gives ids, type ids, mask and char offsets.

    `family` names the transformers class whose rules it follows (e.g. "RobertaTokenizer");
    `model_input_names` are that class's (RoBERTa, XLM-R and DistilBERT take no token types:
    their `type_ids` are what the backend gives, which such a model is never fed)."""

    def __init__(self, backend: Tokenizer, *, cls_token="[CLS]", sep_token="[SEP]",
                 pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]",
                 bos_token=None, eos_token=None, model_max_length: int | None = None,
                 files: dict[str, bytes] | None = None, config: dict | None = None,
                 family: str = "BertTokenizer", model_input_names: list[str] | None = None,
                 clean_up_tokenization_spaces: bool = False):
        self.backend = backend
        self.config = config or {}  # tokenizer_config.json as read (empty when absent)
        self.family = family
        self.model_input_names = model_input_names or ["input_ids", "token_type_ids",
                                                       "attention_mask"]
        self.cls_token, self.sep_token, self.pad_token = cls_token, sep_token, pad_token
        self.mask_token, self.unk_token = mask_token, unk_token
        self.bos_token, self.eos_token = bos_token, eos_token
        self.model_max_length = model_max_length
        # whether transformers' decode() cleans spaces before punctuation for this folder
        self.clean_up_tokenization_spaces = clean_up_tokenization_spaces
        self._files = files or {}
        self.vocab_size = backend.get_vocab_size()
        # token_to_id, not get_vocab(): building the 30k-entry dict costs a cold start ~25 ms
        self.cls_token_id = self._id(cls_token)
        self.sep_token_id = self._id(sep_token)
        pad_id = self._id(pad_token)
        self.pad_token_id = 0 if pad_id is None else pad_id
        self.mask_token_id = self._id(mask_token)
        self.unk_token_id = self._id(unk_token)
        backend.no_truncation()
        backend.no_padding()

    def _id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @classmethod
    def from_dir(cls, path: str | Path) -> "TextTokenizer":
        folder = Path(path)
        if not folder.is_dir():
            raise ArtifactError(f"tokenizer folder {folder} does not exist", "check the path")
        cfg = check_values(_read_json(folder / "tokenizer_config.json"),
                           TOKENIZER_CONFIG_RULES, folder / "tokenizer_config.json")
        special_map = check_values(_read_json(folder / "special_tokens_map.json"),
                                   SPECIAL_TOKENS_MAP_RULES, folder / "special_tokens_map.json")
        legacy_added = _read_json(folder / "added_tokens.json")
        files = {n: (folder / n).read_bytes() for n in TOKENIZER_FILES if (folder / n).is_file()}
        declared = fam.declared_family(folder, cfg, _read_json)
        if "tokenizer.json" in files:
            backend = _backend_from_json(folder, files["tokenizer.json"])
            family = declared or fam.guessed_family(type(backend.model).__name__,
                                                    backend.token_to_id("[CLS]") is not None)
            specials = fam.special_tokens(family, cfg, special_map)
        else:
            slow = fam.slow_file(declared, files)
            if slow is None:
                raise ArtifactError(f"no tokenizer.json or vocab.txt (nor vocab.json + "
                                    f"merges.txt) in {folder}",
                                    "copy the tokenizer files next to the model")
            family = declared or fam.guessed_family(slow, has_cls=False)
            specials = fam.special_tokens(family, cfg, special_map, slow=True)
            backend = fam.from_slow_file(folder / slow, cfg, specials, legacy_added,
                                         family.pair_seps)
        fam.apply_config(backend, cfg, declared)
        fam.add_missing_tokens(backend, cfg, specials, legacy_added)
        max_len = cfg.get("model_max_length")
        if not isinstance(max_len, int) or max_len > 1_000_000:
            max_len = None  # transformers writes 1e30 for "unknown"
        names = cfg.get("model_input_names") or family.model_input_names
        # a slow class's default reaches the fast one converted from it (BertTokenizer: True)
        cleanup = cfg.get("clean_up_tokenization_spaces",
                          family.slow_cleanup and "tokenizer.json" not in files)
        return cls(backend, model_max_length=max_len, files=files, config=cfg,
                   family=family.name, model_input_names=list(names),
                   clean_up_tokenization_spaces=bool(cleanup),
                   **{a: None if t is None else t.content for a, t in specials.items()
                      if a in fam.SPECIAL_ATTRIBUTES})

    def _wrap(self, e) -> Encoding:
        return Encoding(e.ids, e.type_ids, e.attention_mask, e.offsets, e.tokens)

    def encode(self, text: str, text_pair: str | None = None) -> Encoding:
        if not isinstance(text, str):
            raise InputError(f"expected a string, got {type(text).__name__}", "pass text")
        return self._wrap(self.backend.encode(text, text_pair))

    def encode_batch(self, texts: list, pairs: list | None = None) -> list[Encoding]:
        """`pairs[i]` None encodes text i alone: a batch may mix single texts and pairs."""
        batch = list(texts) if pairs is None else [
            t if p is None else (t, p) for t, p in zip(texts, pairs, strict=True)]
        return [self._wrap(e) for e in self.backend.encode_batch(batch)]

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """How many special tokens encode() adds: BERT's pair 3, RoBERTa's and XLM-R's 4."""
        post = self.backend.post_processor
        return 0 if post is None else post.num_special_tokens_to_add(pair)

    @property
    def continuing_subword_prefix(self) -> str | None:
        """WordPiece's "##", which marks a token that continues a word; None for byte-level BPE
        and Unigram, whose word starts carry a space marker (Ġ, ▁) instead (transformers' NER
        then tells words apart by the spaces in the text)."""
        return getattr(self.backend.model, "continuing_subword_prefix", None) or None

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def save(self, out_dir: str | Path) -> None:
        """Copy the files it was read from (byte for byte), adding tokenizer.json if absent."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, data in self._files.items():
            (out / name).write_bytes(data)
        if "tokenizer.json" not in self._files:
            self.backend.save(str(out / "tokenizer.json"))
            if "clean_up_tokenization_spaces" not in self.config:
                # the slow class's default held because there was no tokenizer.json; with one
                # the fast default (False) would, so the choice is written down, as
                # transformers' save_pretrained does
                cfg = {**self.config,
                       "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces}
                (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n",
                                                           encoding="utf-8")


# the name build/, export and the pipelines import (it read WordPiece only, once)
WordPieceTokenizer = TextTokenizer


def load_tokenizer(path: str | Path) -> TextTokenizer:
    """The tokenizer of a model or export folder (`default`: the default checkpoint's)."""
    return TextTokenizer.from_dir(resolve_checkpoint(path))
