"""`pretrain`: masked-LM (and optionally NSP) training of a BERT on plain-text corpora.

Corpus format as in BERT's create_pretraining_data: one sentence (or line) per line, blank lines
between documents. Without NSP, lines are tokenized and packed back to back into full sequences
(transformers' run_mlm `group_texts`, RoBERTa's FULL-SENTENCES). With NSP, each instance is a
pair of segments from one document, the second replaced half the time by text from a random
document (BERT's recipe, segments filled up to the sequence length). A seeded share of the lines
is held out; MLM accuracy on it is reported next to a unigram baseline (always predict the most
frequent training token) scored on the very same masked positions.
"""
from __future__ import annotations

import logging
import random
from collections import Counter
from pathlib import Path

import torch

from bertonnx.runtime.core.errors import ConfigError, InputError
from bertonnx.runtime.core.tokenizer import WordPieceTokenizer, load_tokenizer

from ..checkpoint import load_pretrained
from ..config import BertConfig, preset
from ..heads import Bert
from ..losses import IGNORE, loss_items, mlm_loss, pretraining_loss
from .config import PretrainConfig
from .loop import MODEL_INPUTS, TrainData, Trainer, setup_distributed
from .masking import mask_tokens, sample_uniform

log = logging.getLogger("bertonnx")
EVAL_MASK_SEED = 4242  # fixed, so evaluations at different steps score the same positions


def read_documents(paths: tuple[Path, ...]) -> list[list[str]]:
    """Documents (lists of non-blank lines) from UTF-8 text files; blank lines split them."""
    docs: list[list[str]] = []
    for path in paths:
        if not path.is_file():
            raise InputError(f"corpus file {path} does not exist", "check the path")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"corpus file {path} is not UTF-8 ({e.reason} at byte {e.start})",
                             "convert it to UTF-8") from e
        doc: list[str] = []
        for line in text.splitlines():
            if line.strip():
                doc.append(line.strip())
            elif doc:
                docs.append(doc)
                doc = []
        if doc:
            docs.append(doc)
    if not docs:
        raise InputError(f"the corpus ({', '.join(map(str, paths))}) has no text",
                         "pass files with at least one non-blank line")
    return docs


def split_heldout(docs, fraction: float, seed: int):
    """(train docs, held-out lines): each line is held out with probability `fraction`."""
    rng = random.Random(seed)
    train, held = [], []
    for doc in docs:
        kept = []
        for line in doc:
            (held if rng.random() < fraction else kept).append(line)
        if kept:
            train.append(kept)
    if not train:
        raise InputError("every corpus line was held out for evaluation",
                         "lower --eval-fraction or add text")
    return train, held


def tokenize_docs(tok: WordPieceTokenizer, docs: list[list[str]]) -> list[list[list[int]]]:
    flat = [line for doc in docs for line in doc]
    ids = [e.ids for e in tok.backend.encode_batch(flat, add_special_tokens=False)]
    out, i = [], 0
    for doc in docs:
        lines = [x for x in ids[i:i + len(doc)] if x]
        i += len(doc)
        if lines:
            out.append(lines)
    return out


def _framed(bodies: list[list[int]], tok: WordPieceTokenizer, T: int) -> dict:
    """Each body (at most T - 2 ids) as [CLS] body [SEP], padded to T."""
    ids = torch.full((len(bodies), T), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(bodies), T), dtype=torch.long)
    for i, b in enumerate(bodies):
        seq = [tok.cls_token_id, *b, tok.sep_token_id]
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def pack(docs_ids: list[list[list[int]]], tok: WordPieceTokenizer, T: int) -> dict:
    """[CLS] t1 t2 ... [SEP] blocks of exactly T tokens cut from the stream of all lines; the
    tail block is kept (padded) when it is at least half full."""
    stream = [t for doc in docs_ids for line in doc for t in line]
    L = T - 2
    blocks = [stream[i:i + L] for i in range(0, len(stream), L)]
    if len(blocks) > 1 and len(blocks[-1]) < L // 2:
        blocks.pop()
    return _framed(blocks, tok, T)


def line_by_line(docs_ids: list[list[list[int]]], tok: WordPieceTokenizer, T: int) -> dict:
    """One [CLS] line [SEP] sequence per corpus line (its first T - 2 tokens), padded to T:
    transformers' run_mlm.py --line_by_line. A model asked about one short sentence at a time
    (fill-mask) then trains on what it is asked: text that starts at position 1 and ends
    at [SEP], not a window cut from a stream of unrelated lines."""
    return _framed([line[:T - 2] for doc in docs_ids for line in doc], tok, T)


def nsp_instances(docs_ids, tok: WordPieceTokenizer, T: int, seed: int) -> dict:
    """Sentence pairs as in BERT's create_instances_from_document (dupe factor 1)."""
    rng = random.Random(seed)
    target = T - 3
    seqs, labels = [], []
    for d, doc in enumerate(docs_ids):
        chunk, length, i = [], 0, 0
        while i < len(doc):
            chunk.append(doc[i])
            length += len(doc[i])
            if i == len(doc) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                is_random = len(chunk) == 1 or rng.random() < 0.5
                if is_random:
                    others = [j for j in range(len(docs_ids)) if j != d] or [d]
                    other = docs_ids[rng.choice(others)]
                    start = rng.randrange(len(other))
                    b = [t for s in other[start:] for t in s][: max(1, target - len(a))]
                    i -= len(chunk) - a_end  # the unused segments go back (as BERT does)
                else:
                    b = [t for s in chunk[a_end:] for t in s]
                while len(a) + len(b) > target:  # trim the longer one, BERT's truncate_seq_pair
                    (a if len(a) > len(b) else b).pop()
                if a and b:
                    seqs.append((a, b))
                    labels.append(int(is_random))
                chunk, length = [], 0
            i += 1
    if not seqs:
        raise InputError("the corpus yields no sentence pairs for NSP", "add text or drop --nsp")
    n = len(seqs)
    ids = torch.full((n, T), tok.pad_token_id, dtype=torch.long)
    types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
    for k, (a, b) in enumerate(seqs):
        seq = [tok.cls_token_id, *a, tok.sep_token_id, *b, tok.sep_token_id]
        ids[k, :len(seq)] = torch.tensor(seq)
        mask[k, :len(seq)] = 1
        types[k, len(a) + 2:len(seq)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
            "next_sentence_label": torch.tensor(labels)}


class Masker:
    """Applies `mask_tokens` to stored sequences, with draws keyed by (seed, epoch, sample)."""

    def __init__(self, tok: WordPieceTokenizer, probability: float, whole_word: bool):
        vocab = tok.backend.get_vocab()
        V = tok.vocab_size
        self.special_ids = torch.tensor(sorted({tok.cls_token_id, tok.sep_token_id,
                                                tok.pad_token_id}))
        self.continuation = torch.zeros(V, dtype=torch.bool)
        for piece, i in vocab.items():
            if piece.startswith("##") and i < V:
                self.continuation[i] = True
        self.mask_id, self.V = tok.mask_token_id, V
        self.p, self.whole_word = probability, whole_word

    def __call__(self, feats: dict, idx: torch.Tensor, seed: int) -> dict:
        ids = feats["input_ids"][idx]
        special = torch.isin(ids, self.special_ids) | (feats["attention_mask"][idx] == 0)
        uniform = sample_uniform(seed, idx.tolist(), ids.shape[1])
        word_start = ~self.continuation[ids] if self.whole_word else None
        masked, labels = mask_tokens(ids, special, uniform, mask_id=self.mask_id,
                                     vocab_size=self.V, probability=self.p, word_start=word_start)
        batch = {k: v[idx] for k, v in feats.items()}
        batch["input_ids"], batch["labels"] = masked, labels
        batch["mlm_positions"] = labels != IGNORE
        return batch


def model_config(cfg: PretrainConfig, tok: WordPieceTokenizer) -> BertConfig:
    name = cfg.model
    if name.endswith(".json") or Path(name).is_dir():
        base = BertConfig.from_hf(name)
    else:
        base = preset(name)
    c = base.replace(vocab_size=tok.vocab_size, pad_token_id=tok.pad_token_id)
    if c.max_position_embeddings < cfg.seq_len:
        raise ConfigError(f"--seq-len {cfg.seq_len} exceeds the model's "
                          f"max_position_embeddings {c.max_position_embeddings}",
                          "lower --seq-len or use a config with more positions")
    return c


def build_model(cfg: PretrainConfig, tok: WordPieceTokenizer) -> Bert:
    if cfg.init_from:
        model = load_pretrained(cfg.init_from, cfg.task)
        if model.config.vocab_size != tok.vocab_size:
            raise ConfigError(f"--init-from {cfg.init_from} has a vocabulary of "
                              f"{model.config.vocab_size}, the tokenizer {tok.vocab_size}",
                              "pass the tokenizer the checkpoint was trained with")
        if model.config.max_position_embeddings < cfg.seq_len:
            raise ConfigError(f"--seq-len {cfg.seq_len} exceeds the checkpoint's positions",
                              "lower --seq-len")
        return model
    torch.manual_seed(cfg.train.seed)
    return Bert(model_config(cfg, tok), cfg.task)


def mlm_accuracy(model: Bert, feats: dict, masker: Masker, unigram_id: int,
                 batch_size: int = 64) -> dict:
    """Top-1 accuracy on held-out masked positions, and the unigram baseline on the same ones."""
    device = next(model.parameters()).device
    correct = base = total = 0
    loss_sum = 0.0
    n = feats["input_ids"].shape[0]
    for s in range(0, n, batch_size):
        idx = torch.arange(s, min(n, s + batch_size))
        b = masker(feats, idx, EVAL_MASK_SEED)
        out = model(b["input_ids"].to(device), b["attention_mask"].to(device),
                    b["token_type_ids"].to(device))
        logits = out[0] if isinstance(out, tuple) else out
        labels = b["labels"].to(device)
        sel = labels != IGNORE
        if not sel.any():
            continue
        loss_sum += float(mlm_loss(logits, labels)) * int(sel.sum())
        correct += int((logits.argmax(-1)[sel] == labels[sel]).sum())
        base += int((labels[sel] == unigram_id).sum())
        total += int(sel.sum())
    if total == 0:
        return {"mlm_accuracy": None, "masked_positions": 0}
    return {"mlm_accuracy": correct / total, "unigram_baseline_accuracy": base / total,
            "mlm_loss": loss_sum / total, "masked_positions": total, "eval_sequences": n}


def pretrain(cfg: PretrainConfig, progress: type | None = None) -> dict | None:
    """Train, checkpoint and evaluate; returns the final held-out evaluation."""
    tok = load_tokenizer(cfg.tokenizer)
    if tok.mask_token_id is None or tok.cls_token_id is None or tok.sep_token_id is None:
        raise InputError(f"the tokenizer in {cfg.tokenizer} lacks [MASK], [CLS] or [SEP]",
                         "use a BERT WordPiece tokenizer (bertonnx train-tokenizer)")
    docs = read_documents(cfg.corpus)
    train_docs, held = split_heldout(docs, cfg.eval_fraction, cfg.train.seed)
    model = build_model(cfg, tok)  # config errors surface before any tokenizing work
    train_ids = tokenize_docs(tok, train_docs)
    if not train_ids:
        raise InputError("the corpus tokenizes to nothing", "check the corpus and tokenizer")
    sequences = line_by_line if cfg.line_by_line else pack
    feats = (nsp_instances(train_ids, tok, cfg.seq_len, cfg.train.seed) if cfg.nsp
             else sequences(train_ids, tok, cfg.seq_len))
    masker = Masker(tok, cfg.mlm_probability, cfg.whole_word_mask)
    counts = Counter(t for doc in train_ids for line in doc for t in line)
    unigram_id = counts.most_common(1)[0][0]
    held_ids = tokenize_docs(tok, [held]) if held else []
    eval_feats = None
    if held_ids:
        eval_feats = sequences(held_ids, tok, cfg.seq_len)
        eval_feats = {k: v[:cfg.eval_max_sequences] for k, v in eval_feats.items()}

    def make_batch(idx, epoch):
        return masker(feats, idx, cfg.train.seed * 7_919 + epoch * 1_000_033)

    def loss(out, b):
        labels = b["labels"][b["mlm_positions"]]  # the model decoded these positions only
        if cfg.nsp:
            return pretraining_loss(out[0], out[1], labels, b["next_sentence_label"])
        return mlm_loss(out, labels)

    def evaluate(m):
        r = mlm_accuracy(m, eval_feats, masker, unigram_id)
        r["unigram_token"] = tok.id_to_token(unigram_id)
        return r

    data = TrainData(n=feats["input_ids"].shape[0], make_batch=make_batch, loss=loss,
                     count=lambda b: loss_items(cfg.task, b),
                     evaluate=evaluate if eval_feats is not None else None,
                     save_extra=tok.save, inputs=(*MODEL_INPUTS, "mlm_positions"))
    env = setup_distributed()
    if env.main:
        log.info("pretrain: %d training sequences of %d tokens, %d held-out sequences",
                 data.n, cfg.seq_len, 0 if eval_feats is None else eval_feats["input_ids"].shape[0])
    return Trainer(model, data, cfg.train, env, progress).fit()
