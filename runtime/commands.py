"""Inference commands: fill-mask, classify, qa, tokens, embed, and export-triton — torch-free.

Each command maps its flags onto the pipeline's arguments (same names as the Python API) and
prints either `--json` (the pipeline's own result, machine-readable) or a small table. Errors
are `BertOnnxError`s, which `bertonnx.runtime.cli.main` turns into one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from .bounds import MAX_BATCH_SIZE, MAX_THREADS
from .errors import InputError
from .io import read_input_file, texts_of
from .triton import KINDS as TRITON_KINDS
from .triton import TritonOptions, write_repository


class Renamed(click.Option):
    """An option named as the pipeline argument it sets, whose older spellings (`old`) still
    work but are not shown in --help."""

    def __init__(self, decls, *, old=(), **kw):
        super().__init__([*decls, *old], **kw)
        self.old = set(old)

    def get_help_record(self, ctx):
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.old]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def inference_options(f):
    """Flags every inference command takes."""
    f = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(f)
    f = click.option("--batch-size", type=click.IntRange(1, MAX_BATCH_SIZE), default=32,
                     show_default=True,
                     help="Sequences per onnxruntime call (length-sorted micro-batches).")(f)
    f = click.option("--providers", default=None, metavar="LIST",
                     help="Execution providers, e.g. cuda,cpu (default cpu).")(f)
    f = click.option("--threads", type=click.IntRange(0, MAX_THREADS), default=None,
                     help="onnxruntime intra-op threads (default: onnxruntime's choice).")(f)
    return click.argument("folder", metavar="DIR", type=click.Path(path_type=Path))(f)


def _load(folder: Path, task: str, providers, threads, batch_size):
    from .pipelines import load

    return load(folder, task=task, providers=providers, threads=threads, batch_size=batch_size)


def _gather(texts: tuple[str, ...], input_file) -> tuple[list, bool]:
    """Inputs from arguments or --input (not both); (items, single)."""
    if texts and input_file:
        raise InputError("give texts as arguments or --input FILE, not both", "pick one")
    if input_file:
        return read_input_file(input_file), False
    if not texts:
        raise InputError("no input text", "pass TEXT or --input FILE")
    return list(texts), len(texts) == 1


def _echo_json(obj) -> None:
    """The library's own result, as JSON."""
    click.echo(json.dumps(obj, ensure_ascii=False, indent=2))


def _read(pipe, items: list, single: bool):
    """The inputs read by the task's own rules: the one input as given, or the list."""
    return pipe.read_inputs(items[0] if single else items)


def _table(rows: list[list], headers: list[str]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            click.echo("  ".join("-" * w for w in widths))


def _fmt(v) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _words(value: str | None) -> list[str] | None:
    """fill-mask's --targets: comma-separated words."""
    return [t.strip() for t in value.split(",") if t.strip()] if value else None


def _labels(value: str) -> list[str]:
    """tokens' --ignore-labels: comma-separated labels ('' ignores none)."""
    return [x for x in value.split(",") if x]


def _classify_top_k(value: str | None):
    """classify's --top-k: left out -> transformers' flat shape, 'all' -> every label."""
    from .pipelines.text_classification import LEGACY

    return LEGACY if value is None else None if value == "all" else _positive_int(value, "--top-k")


# task -> {pipeline argument -> conversion of its flag's value (None: as click gives it)}: the
# task options each command maps onto its pipeline, named as the pipeline's arguments (the
# flags are their dashed spellings). `bertonnx run` (runtime/bulk) reads the same table.
TASK_OPTIONS = {
    "fill-mask": {"top_k": None, "targets": _words},
    "text-classification": {"top_k": _classify_top_k, "function_to_apply": None},
    "question-answering": dict.fromkeys(("top_k", "doc_stride", "max_answer_len", "max_seq_len",
                                         "max_question_len", "handle_impossible_answer",
                                         "align_to_words")),
    "token-classification": {"aggregation_strategy": None, "ignore_labels": _labels,
                             "stride": None},
    "feature-extraction": {"pooling": None, "normalize": None},
}


def pipeline_kwargs(task: str, values: dict) -> dict:
    """The pipeline's arguments from the values of the task's flags."""
    return {name: values[name] if conv is None else conv(values[name])
            for name, conv in TASK_OPTIONS[task].items()}


def _input_option(f):
    return click.option("--input", "input_file", metavar="FILE", default=None,
                        help="JSONL (one object or string a line) or plain text lines; - = stdin.")(f)


@click.command("fill-mask")
@inference_options
@click.argument("texts", nargs=-1, metavar="TEXT...")
@_input_option
@click.option("--top-k", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--targets", default=None, metavar="WORDS",
              help="Comma-separated words to score instead of the whole vocabulary.")
def fill_mask(folder, threads, providers, batch_size, as_json, texts, input_file, top_k, targets):
    """Predict the [MASK] token(s) in TEXT."""
    items, single = _gather(texts, input_file)
    items = texts_of(items, input_file)
    kwargs = pipeline_kwargs("fill-mask", dict(top_k=top_k, targets=targets))
    pipe = _load(folder, "fill-mask", providers, threads, batch_size)
    read = _read(pipe, items, single)
    out = pipe(read, **kwargs)
    if as_json:
        return _echo_json(out)
    for text, res in zip(read.records, pipe.per_input(out, read)):
        click.echo(text)
        per_mask = res if res and isinstance(res[0], list) else [res]
        for m, props in enumerate(per_mask):
            if len(per_mask) > 1:
                click.echo(f"mask {m + 1}:")
            _table([[p["token_str"], p["score"], p["sequence"]] for p in props],
                   ["token", "score", "sequence"])
        click.echo("")


@click.command("classify")
@inference_options
@click.argument("texts", nargs=-1, metavar="TEXT...")
@_input_option
@click.option("--pair", "text_pair", default=None, metavar="TEXT",
              help="Second text of a pair (for one TEXT); JSONL takes {\"text\", \"text_pair\"}.")
@click.option("--top-k", default=None, metavar="N|all",
              help="Labels per text, sorted; 'all' for every label [default: the best one, "
                   "in transformers' flat shape].")
@click.option("--function-to-apply", "function_to_apply", cls=Renamed, old=("--function",),
              default="default", show_default=True,
              type=click.Choice(["default", "sigmoid", "softmax", "none"]))
def classify(folder, threads, providers, batch_size, as_json, texts, input_file, text_pair,
             top_k, function_to_apply):
    """Classify TEXT(s) (or text pairs) with a text-classification export."""
    items, single = _gather(texts, input_file)
    if text_pair is not None:
        if len(items) != 1 or input_file:
            raise InputError("--pair goes with exactly one TEXT", "use JSONL for many pairs")
        items = [{"text": items[0], "text_pair": text_pair}]
    kwargs = pipeline_kwargs("text-classification",
                             dict(top_k=top_k, function_to_apply=function_to_apply))
    k = kwargs["top_k"]
    pipe = _load(folder, "text-classification", providers, threads, batch_size)
    read = _read(pipe, items, single)
    out = pipe(read, **kwargs)
    if as_json:
        return _echo_json(out)
    rows = []
    for pair, labels in zip(read.records, pipe.per_input(out, read, top_k=k)):
        labels = [labels] if isinstance(labels, dict) else labels   # the best one alone
        text = " | ".join(v for v in pair if v)
        for j, lab in enumerate(labels):
            rows.append([_short(text) if j == 0 else "", lab["label"], lab["score"]])
    _table(rows, ["text", "label", "score"])


def _positive_int(v: str, name: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"{name} must be a positive integer or 'all', got {v!r}", f"pass {name} 3")
    return n


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


@click.command("qa")
@inference_options
@click.option("--question", "-q", default=None, help="The question.")
@click.option("--context", "-c", default=None, help="The text to find the answer in.")
@_input_option
@click.option("--top-k", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--doc-stride", type=click.IntRange(min=0), default=None,
              help="Overlap between context windows (default min(max_seq_len // 2, 128)).")
@click.option("--max-answer-len", type=click.IntRange(min=1), default=15, show_default=True)
@click.option("--max-seq-len", type=click.IntRange(min=8), default=None,
              help="Tokens per window (default min(model max, 384)).")
@click.option("--max-question-len", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--handle-impossible-answer", is_flag=True, help="Allow the empty answer.")
@click.option("--align-to-words/--no-align-to-words", default=True, show_default=True)
def qa(folder, threads, providers, batch_size, as_json, question, context, input_file, top_k,
       doc_stride, max_answer_len, max_seq_len, max_question_len, handle_impossible_answer,
       align_to_words):
    """Answer --question from --context (or each {"question", "context"} line of --input)."""
    if input_file:
        if question is not None or context is not None:
            raise InputError("give --question/--context or --input, not both", "pick one")
        items = read_input_file(input_file)
        if not all(isinstance(i, dict) for i in items):
            raise InputError(f"{input_file} must hold JSON objects with question and context",
                             'write lines like {"question": "...", "context": "..."}')
        single = False
    else:
        if question is None or context is None:
            raise InputError("both --question and --context are needed",
                             "pass --question Q --context C, or --input FILE")
        items, single = [{"question": question, "context": context}], True
    kwargs = pipeline_kwargs("question-answering", dict(
        top_k=top_k, doc_stride=doc_stride, max_answer_len=max_answer_len,
        max_seq_len=max_seq_len, max_question_len=max_question_len,
        handle_impossible_answer=handle_impossible_answer, align_to_words=align_to_words))
    pipe = _load(folder, "question-answering", providers, threads, batch_size)
    read = _read(pipe, items, single)
    out = pipe(read, **kwargs)
    if as_json:
        return _echo_json(out)
    rows = []
    for example, answers in zip(read.records, pipe.per_input(out, read)):
        answers = [answers] if isinstance(answers, dict) else answers   # top_k 1: the dict
        for j, a in enumerate(answers):
            rows.append([_short(example.question) if j == 0 else "",
                         a["answer"] or "(no answer)", a["score"], a["start"], a["end"]])
    _table(rows, ["question", "answer", "score", "start", "end"])


@click.command("tokens")
@inference_options
@click.argument("texts", nargs=-1, metavar="TEXT...")
@_input_option
@click.option("--aggregation-strategy", "aggregation_strategy", cls=Renamed,
              old=("--aggregation",), default="none", show_default=True,
              type=click.Choice(["none", "simple", "first", "average", "max"]))
@click.option("--ignore-labels", default="O", show_default=True, metavar="LABELS",
              help="Comma-separated labels not to show ('' shows all).")
@click.option("--stride", type=click.IntRange(min=0), default=None,
              help="Token overlap between windows of long texts.")
def tokens(folder, threads, providers, batch_size, as_json, texts, input_file,
           aggregation_strategy, ignore_labels, stride):
    """Label the tokens (entities) of TEXT(s) with a token-classification export."""
    items, single = _gather(texts, input_file)
    items = texts_of(items, input_file)
    kwargs = pipeline_kwargs("token-classification", dict(
        aggregation_strategy=aggregation_strategy, ignore_labels=ignore_labels, stride=stride))
    pipe = _load(folder, "token-classification", providers, threads, batch_size)
    read = _read(pipe, items, single)
    out = pipe(read, **kwargs)
    if as_json:
        return _echo_json(out)
    key = "entity" if aggregation_strategy == "none" else "entity_group"
    for text, ents in zip(read.records, pipe.per_input(out, read)):
        click.echo(_short(text, 100))
        if not ents:
            click.echo("  (no entities)")
            continue
        _table([[e["word"], e[key], e["score"], e["start"], e["end"]] for e in ents],
               ["word", key.replace("_", " "), "score", "start", "end"])
        click.echo("")


@click.command("embed")
@inference_options
@click.argument("texts", nargs=-1, metavar="TEXT...")
@_input_option
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default="mean", show_default=True)
@click.option("--normalize/--no-normalize", default=True, show_default=True,
              help="Unit-length vectors (cosine similarity = dot product).")
def embed(folder, threads, providers, batch_size, as_json, texts, input_file, pooling,
          normalize):
    """Sentence vectors of TEXT(s); the table shows their cosine similarities."""
    items, single = _gather(texts, input_file)
    items = texts_of(items, input_file)
    kwargs = pipeline_kwargs("feature-extraction", dict(pooling=pooling, normalize=normalize))
    pipe = _load(folder, "feature-extraction", providers, threads, batch_size)
    if as_json:
        return _echo_json(pipe(_read(pipe, items, single), **kwargs))
    vecs = pipe(items, pooling=pooling, normalize=normalize, return_tensors=True)
    from .postprocess import cosine_matrix

    click.echo(f"{len(items)} vector(s) of {vecs.shape[1]} dimensions "
               f"({pooling} pooling{', normalized' if normalize else ''})")
    if len(items) > 1:
        sims = cosine_matrix(vecs)
        _table([[f"[{i}] {_short(t, 40)}", *sims[i].round(4).tolist()]
                for i, t in enumerate(items)], ["cosine", *[f"[{i}]" for i in range(len(items))]])
    else:
        v = np.asarray(vecs[0])
        click.echo(f"norm {np.linalg.norm(v):.4f}  first values "
                   + " ".join(f"{x:+.4f}" for x in v[:8]))


# task -> its command: where `bertonnx run` finds each task option's flag, type and default
TASK_COMMANDS = {"fill-mask": fill_mask, "text-classification": classify, "question-answering": qa,
                 "token-classification": tokens, "feature-extraction": embed}


# -- Triton -----------------------------------------------------------------------------------

@click.command("export-triton")
@click.argument("export_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--repository", "-r", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Triton model repository folder (created if missing).")
@click.option("--name", default=None, help="Model name in the repository [default: DIR's name].")
@click.option("--max-batch-size", default=32, show_default=True, type=int,
              help="Largest batch Triton's dynamic batcher forms.")
@click.option("--instances", default=1, show_default=True, type=int,
              help="Model instances (instance_group count).")
@click.option("--kind", type=click.Choice(sorted(TRITON_KINDS)), default="cpu", show_default=True,
              help="Where the instances run.")
@click.option("--max-wait-ms", default=5.0, show_default=True, type=float,
              help="Dynamic batching max queue delay.")
@click.option("--force", is_flag=True, help="Replace an existing REPO/NAME.")
def export_triton(export_dir, repository, name, max_batch_size, instances, kind,
                  max_wait_ms, force):
    """Write a Triton model repository entry (onnxruntime backend) for the export in DIR."""
    target = write_repository(export_dir, repository, TritonOptions(
        name=name, max_batch_size=max_batch_size, instances=instances, kind=kind,
        max_wait_ms=max_wait_ms, force=force))
    click.echo(str(target))
