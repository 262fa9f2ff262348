"""`finetune`: train a pretrained BERT for text classification, token classification or
extractive QA, then write the model (HF format) and eval_results.json.

Every input file is read and validated (labels present and known, tags per token, SQuAD answers
at their answer_start) before the model is loaded or any step is taken.
"""
from __future__ import annotations

import logging
import re

import torch

from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tokenizer import load_tokenizer

from ..checkpoint import load_pretrained, resolve
from ..config import BertConfig
from ..losses import classification_loss, loss_items, span_loss, token_classification_loss
from . import datasets as ds
from . import metrics
from .config import FinetuneConfig
from .loop import MODEL_INPUTS, TrainData, Trainer, setup_distributed

log = logging.getLogger("bertonnx")
_DEFAULT_LABEL = re.compile(r"^LABEL_\d+$")


def trim(batch: dict) -> dict:
    """Cut the padding columns no row of the batch uses."""
    T = int(batch["attention_mask"].sum(1).max())
    return {k: (v[:, :T] if v.dim() == 2 else v) for k, v in batch.items()}


def batched_outputs(model, feats: dict, batch_size: int = 64):
    device = next(model.parameters()).device
    n = feats["input_ids"].shape[0]
    for s in range(0, n, batch_size):
        b = trim({k: feats[k][s:s + batch_size] for k in MODEL_INPUTS})
        yield s, model(**{k: v.to(device) for k, v in b.items()})


def choose_labels(model_dir, train_labels: list[str]) -> dict[int, str]:
    """Keep a fine-tuned model's own label names when the data uses only those; else new ones."""
    old = BertConfig.from_hf(resolve(model_dir)).id2label
    names = set(old.values())
    if not any(_DEFAULT_LABEL.match(v) for v in names) and set(train_labels) <= names:
        return old
    return dict(enumerate(ds.label_order(train_labels)))


def check_known(kind: str, eval_labels, label2id, path) -> None:
    unknown = sorted(set(eval_labels) - set(label2id))
    if unknown:
        raise InputError(f"{path} has {kind} not in the training data: {', '.join(unknown[:5])}",
                         "train on data that covers every label")


def _classification(cfg: FinetuneConfig, tok):
    train = ds.read_classification(cfg.train_file)
    evald = ds.read_classification(cfg.eval_file) if cfg.eval_file else None
    id2label = choose_labels(cfg.model, train.labels)
    label2id = {v: k for k, v in id2label.items()}
    check_known("labels", train.labels, label2id, cfg.train_file)
    if evald:
        check_known("labels", evald.labels, label2id, cfg.eval_file)
    feats = ds.classification_features(train, tok, cfg.max_seq_len, label2id)
    eval_feats = ds.classification_features(evald, tok, cfg.max_seq_len, label2id) if evald \
        else None

    def evaluate(model):
        preds = torch.cat([out.argmax(-1).cpu() for _, out in batched_outputs(model, eval_feats)])
        gold = eval_feats["labels"].tolist()
        return {"accuracy": metrics.accuracy(gold, preds.tolist()),
                "macro_f1": metrics.macro_f1(gold, preds.tolist()), "examples": len(gold),
                "labels": [id2label[i] for i in range(len(id2label))]}

    return id2label, feats, (lambda out, b: classification_loss(out, b["labels"])), \
        (evaluate if eval_feats else None)


def _tokens(cfg: FinetuneConfig, tok):
    train = ds.read_token_classification(cfg.train_file)
    evald = ds.read_token_classification(cfg.eval_file) if cfg.eval_file else None
    all_tags = [t for s in train.tags for t in s]
    id2label = choose_labels(cfg.model, all_tags)
    label2id = {v: k for k, v in id2label.items()}
    check_known("tags", all_tags, label2id, cfg.train_file)
    if evald:
        check_known("tags", [t for s in evald.tags for t in s], label2id, cfg.eval_file)
    feats = ds.token_features(train, tok, cfg.max_seq_len, label2id)
    eval_feats = ds.token_features(evald, tok, cfg.max_seq_len, label2id) if evald else None
    outside = "O" if "O" in label2id else id2label[0]

    def evaluate(model):
        preds = []
        for s, out in batched_outputs(model, eval_feats):
            arg = out.argmax(-1).cpu()
            for r in range(arg.shape[0]):
                words = eval_feats["word_index"][s + r, :arg.shape[1]]
                sent = [outside] * len(evald.tokens[s + r])
                for pos in (words >= 0).nonzero().flatten().tolist():
                    sent[int(words[pos])] = id2label[int(arg[r, pos])]
                preds.append(sent)
        return {**metrics.entity_prf(evald.tags, preds), "examples": len(preds)}

    def loss(out, b):
        return token_classification_loss(out, b["labels"])

    train_feats = {k: v for k, v in feats.items() if k != "word_index"}
    return id2label, train_feats, loss, (evaluate if eval_feats else None)


def best_answer(example: ds.SquadExample, parts, max_answer_len: int, allow_null: bool,
                n_best: int = 20) -> str:
    """Highest start+end span over an example's windows; "" when the null ([CLS]) score wins
    and the data has unanswerable questions (HF's postprocess_qa_predictions).

    Not the runtime's decoder (postprocess.qa_best_spans) on purpose: SQuAD evaluation ranks
    raw logit sums across windows with HF's n-best and null rules, so that F1/EM here compare
    with HF's published scripts; the runtime ranks per-window probabilities as the pipeline."""
    best, best_score, null = "", float("-inf"), float("inf")
    for start, end, offsets in parts:
        null = min(null, float(start[0] + end[0]))
        for i in start.topk(min(n_best, len(start))).indices.tolist():
            for j in end.topk(min(n_best, len(end))).indices.tolist():
                if i >= len(offsets) or j >= len(offsets) or offsets[i] is None \
                        or offsets[j] is None or j < i or j - i + 1 > max_answer_len:
                    continue
                score = float(start[i] + end[j])
                if score > best_score:
                    best_score = score
                    best = example.context[offsets[i][0]:offsets[j][1]]
    if allow_null and null > best_score:
        return ""
    return best


def _squad(cfg: FinetuneConfig, tok):
    train = ds.read_squad(cfg.train_file)
    evald = ds.read_squad(cfg.eval_file) if cfg.eval_file else None
    feats = ds.squad_features(train, tok, cfg.max_seq_len, cfg.doc_stride, cfg.max_query_len)
    eval_feats = ds.squad_features(evald, tok, cfg.max_seq_len, cfg.doc_stride,
                                   cfg.max_query_len) if evald else None

    def evaluate(model):
        per_example: dict[int, list] = {}
        for s, (start, end) in batched_outputs(model, eval_feats.tensors):
            for r in range(start.shape[0]):
                f = s + r
                per_example.setdefault(eval_feats.example[f], []).append(
                    (start[r].cpu(), end[r].cpu(), eval_feats.offsets[f]))
        allow_null = any(not ex.answers for ex in evald)
        pred = {ex.qid: best_answer(ex, per_example.get(i, []), cfg.max_answer_len, allow_null)
                for i, ex in enumerate(evald)}
        gold = {ex.qid: [a["text"] for a in ex.answers] for ex in evald}
        return metrics.squad_scores(gold, pred)

    def loss(out, b):
        return span_loss(out[0], out[1], b["start_positions"], b["end_positions"])

    return None, feats.tensors, loss, (evaluate if eval_feats else None)


READERS = {"text-classification": _classification, "token-classification": _tokens,
           "question-answering": _squad}


def finetune(cfg: FinetuneConfig, progress: type | None = None) -> dict | None:
    """Validate the data, fine-tune, save the model and return the final evaluation."""
    folder = resolve(cfg.model)
    tok = load_tokenizer(folder)
    id2label, feats, loss, evaluate = READERS[cfg.task](cfg, tok)
    torch.manual_seed(cfg.train.seed)  # the fresh head's initialisation
    model = load_pretrained(folder, cfg.task, id2label=id2label)
    T = model.config.max_position_embeddings
    if cfg.max_seq_len > T:
        raise InputError(f"--max-seq-len {cfg.max_seq_len} exceeds the model's {T} positions",
                         f"use --max-seq-len {T} or less")

    data = TrainData(n=feats["input_ids"].shape[0],
                     make_batch=lambda idx, epoch: trim({k: v[idx] for k, v in feats.items()}),
                     loss=loss, count=lambda b: loss_items(cfg.task, b), evaluate=evaluate,
                     save_extra=tok.save)
    env = setup_distributed()
    if env.main:
        log.info("finetune %s: %d training features", cfg.task, data.n)
    return Trainer(model, data, cfg.train, env, progress).fit()
