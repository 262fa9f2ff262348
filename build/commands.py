"""Training commands: `bertonnx train-tokenizer`, `pretrain`, `finetune`.

click maps flags onto the typed configs in bertonnx.build.train.config and calls one function;
no logic lives here. The same commands run under `torchrun --nproc_per_node N` (DDP).
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from bertonnx.runtime.cli.progress import Progress  # the bar the training commands show
from bertonnx.runtime.core.errors import InputError

from . import train
from .train import FinetuneConfig, PretrainConfig, TokenizerConfig, TrainConfig


def _loop_options(f):
    options = [
        click.option("--out", type=click.Path(path_type=Path), required=True,
                     help="Output folder (model, checkpoints, train_log.jsonl)."),
        click.option("--max-steps", type=int, default=None,
                     help="Optimizer steps (wins over --epochs)."),
        click.option("--epochs", type=float, default=1.0, show_default=True),
        click.option("--batch-size", type=int, default=32, show_default=True,
                     help="Per process and micro-batch."),
        click.option("--grad-accum", type=int, default=1, show_default=True),
        click.option("--warmup", type=float, default=0.06, show_default=True,
                     help="Warmup: a fraction of the steps (<1) or a step count."),
        click.option("--weight-decay", type=float, default=0.01, show_default=True),
        click.option("--max-grad-norm", type=float, default=1.0, show_default=True),
        click.option("--layer-decay", type=float, default=1.0, show_default=True,
                     help="Each layer's lr is this times the next one's above it (1: one lr)."),
        click.option("--head-lr-scale", type=float, default=1.0, show_default=True,
                     help="The task head's lr as a multiple of --lr."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--log-every", type=int, default=10, show_default=True),
        click.option("--save-every", type=int, default=500, show_default=True),
        click.option("--keep-checkpoints", type=int, default=2, show_default=True,
                     help="checkpoint-N folders kept (the newest)."),
        click.option("--eval-every", type=int, default=0, show_default=True,
                     help="Evaluate every N steps (0: at the end only)."),
        click.option("--resume", is_flag=True,
                     help="Continue from the last checkpoint in --out."),
        click.option("--precision", type=click.Choice(["auto", "fp32", "bf16", "fp16"]),
                     default="auto", show_default=True),
        click.option("--no-progress", is_flag=True, help="No progress bar."),
    ]
    for opt in reversed(options):
        f = opt(f)
    return f


def _train_config(kw: dict, lr: float):
    return TrainConfig(out=kw["out"], max_steps=kw["max_steps"], epochs=kw["epochs"],
                       batch_size=kw["batch_size"], grad_accum=kw["grad_accum"], lr=lr,
                       warmup=kw["warmup"], weight_decay=kw["weight_decay"],
                       max_grad_norm=kw["max_grad_norm"], layer_decay=kw["layer_decay"],
                       head_lr_scale=kw["head_lr_scale"], seed=kw["seed"],
                       log_every=kw["log_every"], save_every=kw["save_every"],
                       keep_checkpoints=kw["keep_checkpoints"],
                       eval_every=kw["eval_every"], resume=kw["resume"],
                       precision=kw["precision"], progress=not kw["no_progress"])


def _report(result: dict | None, out: Path) -> None:
    if result is not None:
        click.echo(json.dumps(result, indent=2))
    click.echo(f"saved to {out}", err=True)


@click.command("train-tokenizer")
@click.argument("corpus", nargs=-1, type=click.Path(path_type=Path))
@click.option("--vocab-size", type=int, default=30522, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--cased", is_flag=True, help="Keep case and accents (default: uncased).")
@click.option("--min-frequency", type=int, default=2, show_default=True)
def train_tokenizer(corpus, vocab_size, out, cased, min_frequency):
    """Learn a BERT WordPiece vocabulary from CORPUS text files."""
    path = train.train_tokenizer(TokenizerConfig(corpus=corpus, out=out, vocab_size=vocab_size,
                                                 cased=cased, min_frequency=min_frequency))
    click.echo(f"saved tokenizer to {path}")


@click.command("pretrain")
@click.argument("corpus", nargs=-1, type=click.Path(path_type=Path))
@click.option("--tokenizer", type=click.Path(path_type=Path), required=True,
              help="Folder from train-tokenizer, any BERT tokenizer folder, or `default`.")
@click.option("--config", "model", default="mini", show_default=True,
              help="Preset (tiny, mini, small, base, large) or a config.json path.")
@click.option("--seq-len", type=int, default=128, show_default=True)
@click.option("--lr", type=float, default=1e-4, show_default=True)
@click.option("--nsp", is_flag=True, help="Add next-sentence prediction (BertForPreTraining).")
@click.option("--whole-word-mask", is_flag=True, help="Mask all pieces of a word together.")
@click.option("--line-by-line", is_flag=True,
              help="One sequence per corpus line (cut at --seq-len) instead of packed blocks.")
@click.option("--mlm-probability", type=float, default=0.15, show_default=True)
@click.option("--init-from", default=None,
              help="Continue from this checkpoint's weights (a folder, hub id or `default`).")
@click.option("--eval-fraction", type=float, default=0.05, show_default=True,
              help="Share of lines held out for MLM accuracy.")
@_loop_options
def pretrain(corpus, tokenizer, model, seq_len, lr, nsp, whole_word_mask, line_by_line,
             mlm_probability, init_from, eval_fraction, **kw):
    """Pretrain a BERT with masked-LM (and optionally NSP) on CORPUS text files."""
    if not corpus:
        raise InputError("no corpus files given", "pass one or more text files")
    cfg = PretrainConfig(corpus=corpus, tokenizer=tokenizer, model=model,
                         train=_train_config(kw, lr), seq_len=seq_len, nsp=nsp,
                         whole_word_mask=whole_word_mask, line_by_line=line_by_line,
                         mlm_probability=mlm_probability,
                         init_from=init_from, eval_fraction=eval_fraction)
    _report(train.pretrain(cfg, Progress), cfg.train.out)


@click.command("finetune")
@click.argument("model")
@click.option("--task", required=True, type=click.Choice(
    ["text-classification", "token-classification", "question-answering"]))
@click.option("--train", "train_file", type=click.Path(path_type=Path), required=True,
              help="CSV/JSONL (classification), JSONL (tokens) or SQuAD JSON (QA).")
@click.option("--eval", "eval_file", type=click.Path(path_type=Path), default=None)
@click.option("--lr", type=float, default=3e-5, show_default=True)
@click.option("--max-seq-len", type=int, default=128, show_default=True)
@click.option("--doc-stride", type=int, default=128, show_default=True,
              help="QA: tokens of overlap between context windows.")
@click.option("--max-query-len", type=int, default=64, show_default=True)
@_loop_options
def finetune(model, task, train_file, eval_file, lr, max_seq_len, doc_stride, max_query_len,
             **kw):
    """Fine-tune MODEL (a folder, a hub id or `default`) for TASK; writes the model and
    eval_results.json."""
    cfg = FinetuneConfig(model=model, task=task, train_file=train_file, eval_file=eval_file,
                         train=_train_config(kw, lr), max_seq_len=max_seq_len,
                         doc_stride=doc_stride, max_query_len=max_query_len)
    _report(train.finetune(cfg, Progress), cfg.train.out)
