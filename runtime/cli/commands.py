"""Inference commands: one per task, made from its record (runtime/core/tasks.py) — torch-free.

Each task's command takes its inputs by the record's input fields (TEXT... and --input; a
pair's --pair; QA's --question/--context) and one option per parameter of the record, spelled
as the pipeline argument with dashes, typed by the parameter's rule, and maps them onto the
pipeline's arguments. It prints either `--json` (the pipeline's own result, machine-readable)
or a small table (`show.py`). Errors are `BertOnnxError`s, which `bertonnx.runtime.cli.main`
turns into one line. `export-triton` is here too: it writes a folder, loads no model.
"""
from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from ..core.bounds import MAX_BATCH_SIZE, MAX_THREADS
from ..core.errors import InputError, TaskMismatchError
from ..core.io import read_input_file, texts_of
from ..core.tasks import SAME, TASKS, Param, Task
from ..triton.repository import BACKENDS as TRITON_BACKENDS
from ..triton.repository import KINDS as TRITON_KINDS
from ..triton.repository import TritonOptions, write_repository
from .show import echo_json, show


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
    f = click.option("--providers", default=None, metavar="ENGINE",
                     help="Engine: auto (default: the fastest this CPU has that the export "
                          "proved), cpu, openvino, openvino:bf16, openvino:f32, cuda, "
                          "tensorrt, or onnxruntime providers as a list (cuda,cpu).")(f)
    f = click.option("--threads", type=click.IntRange(0, MAX_THREADS), default=None,
                     help="onnxruntime intra-op threads (default: onnxruntime's choice).")(f)
    return click.argument("folder", metavar="DIR", type=click.Path(path_type=Path))(f)


# -- a task's parameters as options ----------------------------------------------------------


def cli_parameters(task: str) -> tuple[Param, ...]:
    """The task's parameters the command line offers."""
    return tuple(p for p in TASKS[task].params if p.flag is not None)


def cli_default(p: Param):
    return p.default if p.flag.default is SAME else p.flag.default


def option(p: Param) -> click.Option:
    """The click option of a task parameter: typed by its rule, narrowed by its Flag."""
    flag, rule = p.flag, p.rule
    default = cli_default(p)
    text = flag.help or p.help
    if rule.kind == "bool":
        decls = [f"{p.option}/--no-{p.option[2:]}" if flag.negatable else p.option, p.name]
        return Renamed(decls, old=flag.old, is_flag=True, default=bool(default),
                       show_default=flag.negatable, help=text)
    if flag.parse is not None:
        kind = click.STRING
    elif rule.kind == "int":
        # no max: past the rule's bound the pipeline refuses, in the words every entry point uses
        kind = click.IntRange(min=rule.low if flag.low is None else flag.low)
    elif rule.kind == "choice":
        kind = click.Choice(list(flag.options or rule.options))
    else:
        kind = click.STRING
    return Renamed([p.option, p.name], old=flag.old, type=kind, default=default,
                   metavar=flag.metavar, show_default=default is not None, help=text)


def pipeline_kwargs(task: str, values: dict, given) -> dict:
    """The pipeline's arguments from the values of the task's options that were `given`
    (`parse` applied). An option left out is left to the pipeline: its default, the export's
    own included, is the one every entry point gets."""
    return {p.name: p.flag.parse(values[p.name]) if p.flag.parse else values[p.name]
            for p in cli_parameters(task) if p.name in given}


def given_options(ctx: click.Context, names) -> set[str]:
    """Which of the options `names` the command line set (not left at their defaults)."""
    return {n for n in names
            if ctx.get_parameter_source(n) not in (ParameterSource.DEFAULT, None)}


# -- a task's inputs -------------------------------------------------------------------------


def _gather(texts: tuple[str, ...], input_file) -> tuple[list, bool]:
    """Inputs from arguments or --input (not both); (items, single)."""
    if texts and input_file:
        raise InputError("give texts as arguments or --input FILE, not both", "pick one")
    if input_file:
        return read_input_file(input_file), False
    if not texts:
        raise InputError("no input text", "pass TEXT or --input FILE")
    return list(texts), len(texts) == 1


def _texts(values: dict) -> tuple[list, bool]:
    items, single = _gather(values["texts"], values["input_file"])
    return texts_of(items, values["input_file"]), single


def _pairs(values: dict) -> tuple[list, bool]:
    items, single = _gather(values["texts"], values["input_file"])
    if values["text_pair"] is not None:
        if len(items) != 1 or values["input_file"]:
            raise InputError("--pair goes with exactly one TEXT", "use JSONL for many pairs")
        items = [{"text": items[0], "text_pair": values["text_pair"]}]
    return items, single


def _questions(values: dict) -> tuple[list, bool]:
    question, context, input_file = values["question"], values["context"], values["input_file"]
    if input_file:
        if question is not None or context is not None:
            raise InputError("give --question/--context or --input, not both", "pick one")
        items = read_input_file(input_file)
        if not all(isinstance(i, dict) for i in items):
            raise InputError(f"{input_file} must hold JSON objects with question and context",
                             'write lines like {"question": "...", "context": "..."}')
        return items, False
    if question is None or context is None:
        raise InputError("both --question and --context are needed",
                         "pass --question Q --context C, or --input FILE")
    return [{"question": question, "context": context}], True


def _ranking(values: dict) -> tuple[list, bool]:
    """rerank: --query Q DOC...; --query Q --input FILE (a document a line); or --input FILE
    of {"query", "documents"} objects, one ranking each."""
    query, docs, input_file = values["query"], values["documents"], values["input_file"]
    if docs and input_file:
        raise InputError("give documents as arguments or --input FILE, not both", "pick one")
    if input_file:
        items = read_input_file(input_file)
        if query is not None:
            return [{"query": query, "documents": texts_of(items, input_file)}], True
        if not all(isinstance(i, dict) for i in items):
            raise InputError(f"{input_file} holds documents but no --query was given",
                             'pass --query Q, or write lines like {"query": "...", '
                             '"documents": ["...", ...]}')
        return items, False
    if query is None:
        raise InputError("no --query", "pass --query Q DOC..., or --input FILE")
    if not docs:
        raise InputError("no documents to rank", "pass them after --query Q, or --input FILE")
    return [{"query": query, "documents": list(docs)}], True


_INPUT_HELP = "JSONL (one object or string a line) or plain text lines; - = stdin."
_TEXTS = (click.Argument(["texts"], nargs=-1, metavar="TEXT..."),
          click.Option(["--input", "input_file"], metavar="FILE", default=None, help=_INPUT_HELP))
# a record's input fields -> the command's input arguments and how it gathers them
INPUT_FORMS = {
    ("text",): (_TEXTS, _texts),
    ("text", "text_pair"): ((*_TEXTS, click.Option(
        ["--pair", "text_pair"], default=None, metavar="TEXT",
        help="Second text of a pair (for one TEXT); JSONL takes {\"text\", \"text_pair\"}.")),
        _pairs),
    ("question", "context"): ((
        click.Option(["--question", "-q"], default=None, help="The question."),
        click.Option(["--context", "-c"], default=None, help="The text to find the answer in."),
        click.Option(["--input", "input_file"], metavar="FILE", default=None,
                     help=_INPUT_HELP)), _questions),
    ("query", "documents"): ((
        click.Argument(["documents"], nargs=-1, metavar="DOC..."),
        click.Option(["--query", "-q"], default=None, help="The query to rank DOC... for."),
        click.Option(["--input", "input_file"], metavar="FILE", default=None,
                     help="With --query: the documents, one a line (JSONL strings or text); "
                          'without: JSONL {"query", "documents"} objects, one ranking each; '
                          "- = stdin.")), _ranking),
}


# -- the commands ----------------------------------------------------------------------------


def task_command(record: Task) -> click.Command:
    """The `bertonnx` command of a task: its inputs, its parameters, the shared flags."""
    inputs, gather = INPUT_FORMS[record.inputs]

    def run(folder, threads, providers, batch_size, as_json, **values):
        from ..core.pipelines import load  # onnxruntime only once the command runs

        items, single = gather(values)
        given = given_options(click.get_current_context(), values)
        kwargs = pipeline_kwargs(record.name, values, given)
        pipe = _load(load, folder, record.name, providers=providers, threads=threads,
                     batch_size=batch_size)
        if pipe.task != record.name:   # rerank on a ColBERT export: its options that apply
            _check_options(pipe.task, kwargs)
        read = pipe.read_inputs(items[0] if single else items)
        if as_json:
            return echo_json(pipe(read, **kwargs))
        show(record.name, pipe, read, kwargs)

    shared = inference_options(lambda: None).__click_params__[::-1]  # DIR, then the flags
    return click.Command(record.command, callback=run, short_help=record.summary,
                         help=f"{record.summary} ({record.name} export in DIR)",
                         params=[*shared, *inputs, *map(option, cli_parameters(record.name))])


# command's task -> the other task whose exports it runs: `rerank` ranks by MaxSim with a
# ColBERT (multi-vector) export, which reads {query, documents} inputs as text-ranking does
ALSO_SERVES = {"text-ranking": "multi-vector"}


def _load(load, folder, task: str, **options):
    """The export's pipeline for `task`'s command (or ALSO_SERVES' task); the mismatch error
    names the right command otherwise."""
    try:
        return load(folder, task=task, **options)
    except TaskMismatchError:
        if task not in ALSO_SERVES:
            raise
        pipe = load(folder, **options)
        if pipe.task != ALSO_SERVES[task]:
            raise
        return pipe


def _check_options(task: str, kwargs: dict) -> None:
    stray = sorted(set(kwargs) - set(TASKS[task].parameters))
    if stray:
        raise InputError(f"--{stray[0].replace('_', '-')} does not apply to a {task} export "
                         "(ranked by MaxSim)", "leave it out")


# task -> its command; `bertonnx run` (runtime/bulk) finds each option's flag, type and default
TASK_COMMANDS = {name: task_command(record) for name, record in TASKS.items()}
_BY_ATTRIBUTE = {record.command.replace("-", "_"): TASK_COMMANDS[name]
                 for name, record in TASKS.items()}


def __getattr__(name: str):
    """`commands.fill_mask`, `commands.qa`, ...: the task commands by their Python names (the
    CLI's table names them so, runtime/cli/main.py)."""
    try:
        return _BY_ATTRIBUTE[name]
    except KeyError:
        raise AttributeError(name) from None


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
@click.option("--backend", type=click.Choice(TRITON_BACKENDS), default="python",
              show_default=True,
              help="python: the pipeline (raw text in, answers out) in Triton's Python "
                   "backend; onnxruntime: the graph alone (clients send token ids).")
@click.option("--threads", default=None, type=click.IntRange(0, MAX_THREADS),
              help="With --backend python: onnxruntime threads per instance "
                   "[default: onnxruntime's].")
def export_triton(export_dir, repository, name, max_batch_size, instances, kind,
                  max_wait_ms, force, backend, threads):
    """Write a Triton model repository entry for the export in DIR: the pipeline model for the
    Python backend (default) or the graph for the onnxruntime backend."""
    if threads is not None and backend != "python":
        raise click.UsageError("--threads needs --backend python")
    target = write_repository(export_dir, repository, TritonOptions(
        name=name, max_batch_size=max_batch_size, instances=instances, kind=kind,
        max_wait_ms=max_wait_ms, force=force, backend=backend, threads=threads))
    click.echo(str(target))
