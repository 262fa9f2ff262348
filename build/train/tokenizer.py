"""`train_tokenizer`: a BERT WordPiece vocabulary learnt with the `tokenizers` library.

Writes tokenizer.json (the full pipeline), vocab.txt and tokenizer_config.json /
special_tokens_map.json in the layout transformers' BertTokenizerFast reads, so the same folder
works with transformers and with `bertonnx.build.load_tokenizer`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import processors
from tokenizers.implementations import BertWordPieceTokenizer

from bertonnx.runtime.core.errors import InputError

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..4, BERT's order up to [MASK]


@dataclass(frozen=True)
class TokenizerConfig:
    corpus: tuple[Path, ...]
    out: Path
    vocab_size: int = 30522
    cased: bool = False
    min_frequency: int = 2
    limit_alphabet: int = 1000
    max_length: int = 512

    def __post_init__(self):
        object.__setattr__(self, "corpus", tuple(Path(p) for p in self.corpus))
        object.__setattr__(self, "out", Path(self.out))
        if not self.corpus:
            raise InputError("no corpus files given", "pass one or more text files")
        if self.vocab_size < len(SPECIALS) + 1:
            raise InputError(f"--vocab-size {self.vocab_size} is too small", "use at least 100")


def check_corpus(paths: tuple[Path, ...]) -> None:
    has_text = False
    for p in paths:
        if not p.is_file():
            raise InputError(f"corpus file {p} does not exist", "check the path")
        try:
            with open(p, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        has_text = True
        except UnicodeDecodeError as e:
            raise InputError(f"corpus file {p} is not UTF-8 ({e.reason})",
                             "convert it to UTF-8") from e
    if not has_text:
        raise InputError(f"the corpus ({', '.join(map(str, paths))}) has no text",
                         "pass files with at least one non-blank line")


def train_tokenizer(cfg: TokenizerConfig) -> Path:
    check_corpus(cfg.corpus)
    lower = not cfg.cased
    tok = BertWordPieceTokenizer(clean_text=True, handle_chinese_chars=True,
                                 strip_accents=None, lowercase=lower)
    tok.train([str(p) for p in cfg.corpus], vocab_size=cfg.vocab_size,
              min_frequency=cfg.min_frequency, limit_alphabet=cfg.limit_alphabet,
              special_tokens=list(SPECIALS), show_progress=False, wordpieces_prefix="##")
    # The post-processor is only wired at construction when [CLS]/[SEP] are already in the
    # vocabulary, which is empty before training: add it now, as BertTokenizerFast's template.
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                "cls_token": "[CLS]", "mask_token": "[MASK]"}
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower,
              "strip_accents": None, "tokenize_chinese_chars": True,
              "model_max_length": cfg.max_length, "clean_up_tokenization_spaces": False,
              **specials}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n",
                                               encoding="utf-8")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n",
                                                 encoding="utf-8")
    return out
