"""WordPiece tokenizer on the `tokenizers` library, with transformers' BertTokenizerFast rules.

From tokenizer.json when present, else built from vocab.txt + tokenizer_config.json exactly as
transformers' `BertConverter` does; in both cases tokenizer_config's do_lower_case /
strip_accents / tokenize_chinese_chars win over the file's normalizer (BertTokenizerFast does
the same in its __init__). Torch-free: shared by build, export and runtime.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from .errors import ArtifactError, InputError
from .files import read_json_object

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                   "special_tokens_map.json")


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]
    offsets: list[tuple[int, int]]
    tokens: list[str]


def _read_json(path: Path) -> dict:
    return read_json_object(path, "restore the file") if path.is_file() else {}


def _special(cfg: dict, specials: dict, name: str, default: str) -> str:
    v = cfg.get(name) or specials.get(name) or default
    return v["content"] if isinstance(v, dict) else v


def _normalizer(cfg: dict) -> normalizers.BertNormalizer:
    lower = cfg.get("do_lower_case", True)
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=cfg.get("tokenize_chinese_chars", True),
        strip_accents=cfg.get("strip_accents"), lowercase=lower)


class WordPieceTokenizer:
    """A BERT tokenizer: `encode(text, pair)` gives ids, type ids, mask and char offsets."""

    def __init__(self, backend: Tokenizer, *, cls_token="[CLS]", sep_token="[SEP]",
                 pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]",
                 model_max_length: int | None = None, files: dict[str, bytes] | None = None,
                 config: dict | None = None):
        self.backend = backend
        self.config = config or {}  # tokenizer_config.json as read (empty when absent)
        self.cls_token, self.sep_token, self.pad_token = cls_token, sep_token, pad_token
        self.mask_token, self.unk_token = mask_token, unk_token
        self.model_max_length = model_max_length
        self._files = files or {}
        self.vocab_size = backend.get_vocab_size()
        # token_to_id, not get_vocab(): building the 30k-entry dict costs a cold start ~25 ms
        self.cls_token_id = backend.token_to_id(cls_token)
        self.sep_token_id = backend.token_to_id(sep_token)
        pad_id = backend.token_to_id(pad_token)
        self.pad_token_id = 0 if pad_id is None else pad_id
        self.mask_token_id = backend.token_to_id(mask_token)
        self.unk_token_id = backend.token_to_id(unk_token)
        backend.no_truncation()
        backend.no_padding()

    @classmethod
    def from_dir(cls, path: str | Path) -> "WordPieceTokenizer":
        folder = Path(path)
        if not folder.is_dir():
            raise ArtifactError(f"tokenizer folder {folder} does not exist", "check the path")
        cfg = _read_json(folder / "tokenizer_config.json")
        specials = _read_json(folder / "special_tokens_map.json")
        tok = {n: _special(cfg, specials, n, d) for n, d in (
            ("cls_token", "[CLS]"), ("sep_token", "[SEP]"), ("pad_token", "[PAD]"),
            ("mask_token", "[MASK]"), ("unk_token", "[UNK]"))}
        files = {n: (folder / n).read_bytes() for n in TOKENIZER_FILES if (folder / n).is_file()}
        if "tokenizer.json" in files:
            try:
                text = files["tokenizer.json"].decode("utf-8")
                backend = Tokenizer.from_str(text)
            except Exception as e:
                raise ArtifactError(f"{folder / 'tokenizer.json'} cannot be read ({e})",
                                    "restore the file or remove it to use vocab.txt") from e
            # the file's own normalizer settings, read off the backend (parsing the JSON again
            # would cost a cold start ~25 ms)
            norm = backend.normalizer
            if isinstance(norm, normalizers.BertNormalizer) and any(
                    k in cfg and cfg[k] != getattr(norm, n) for k, n in (
                        ("do_lower_case", "lowercase"), ("strip_accents", "strip_accents"),
                        ("tokenize_chinese_chars", "handle_chinese_chars"))):
                backend.normalizer = _normalizer({**{
                    "do_lower_case": norm.lowercase, "strip_accents": norm.strip_accents,
                    "tokenize_chinese_chars": norm.handle_chinese_chars}, **cfg})
        elif (folder / "vocab.txt").is_file():
            backend = cls._from_vocab(folder / "vocab.txt", cfg, tok)
        else:
            raise ArtifactError(f"no tokenizer.json or vocab.txt in {folder}",
                                "copy the tokenizer files next to the model")
        max_len = cfg.get("model_max_length")
        if not isinstance(max_len, int) or max_len > 1_000_000:
            max_len = None  # transformers writes 1e30 for "unknown"
        return cls(backend, model_max_length=max_len, files=files, config=cfg, **tok)

    @staticmethod
    def _from_vocab(vocab_file: Path, cfg: dict, tok: dict) -> Tokenizer:
        vocab = {}
        try:
            with open(vocab_file, encoding="utf-8") as f:
                for i, line in enumerate(f):
                    vocab.setdefault(line.rstrip("\n"), i)
        except UnicodeDecodeError as e:
            raise ArtifactError(f"{vocab_file} is not UTF-8 ({e.reason} at byte {e.start})",
                                "restore the file (BERT vocab files are UTF-8)") from e
        for name in ("cls_token", "sep_token", "unk_token"):
            if tok[name] not in vocab:
                raise ArtifactError(f"{vocab_file} lacks the special token {tok[name]}",
                                    "use a BERT vocab.txt")
        backend = Tokenizer(models.WordPiece(vocab, unk_token=tok["unk_token"],
                                             max_input_chars_per_word=100))
        backend.normalizer = _normalizer(cfg)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls_, sep = tok["cls_token"], tok["sep_token"]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{cls_}:0 $A:0 {sep}:0", pair=f"{cls_}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls_, vocab[cls_]), (sep, vocab[sep])])
        backend.decoder = decoders.WordPiece(prefix="##")
        specials = [t for t in tok.values() if t in vocab]
        backend.add_special_tokens(specials)
        return backend

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


def load_tokenizer(path: str | Path) -> WordPieceTokenizer:
    """The tokenizer of a model or export folder (`default`: the default checkpoint's)."""
    from .defaults import resolve_checkpoint

    return WordPieceTokenizer.from_dir(resolve_checkpoint(path))
