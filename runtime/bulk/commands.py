"""`bertonnx run DIR --input FILE --output FILE`: a task over a whole file (runtime/bulk).

The task is the export's; its options are the task command's own (`bertonnx classify --top-k`
is `bertonnx run --top-k` on a classification export), taken from that command — its flags,
types and defaults, made from the task's record — and mapped onto the pipeline the same way
(runtime/cli/commands.py `pipeline_kwargs`). An option of another task is refused in one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..cli.commands import (TASK_COMMANDS, cli_parameters, given_options, inference_options,
                            pipeline_kwargs)
from ..core.bounds import read_streams
from ..core.pipelines import load
from ..core.tasks import TASKS
from ..core.errors import InputError
from .job import CHUNK_SIZE, JobOptions, run_job
from .readers import FORMATS
from .rows import ID
from .runner import ON_ERROR


def _shared_options() -> dict[str, dict[str, click.Option]]:
    """option name -> {task: that task command's click.Option} for every task option."""
    shared: dict[str, dict[str, click.Option]] = {}
    for task, command in TASK_COMMANDS.items():
        names = {p.name for p in cli_parameters(task)}
        for p in command.params:
            if p.name in names:
                shared.setdefault(p.name, {})[task] = p
    return shared


TASK_FLAGS = _shared_options()


def _shown(p: click.Option) -> list[str]:
    return [o for o in p.opts if o not in getattr(p, "old", ())]  # not the Renamed spellings


# an option several tasks share, said for all of them
HELP = {"top_k": "Results per input: fill-mask's proposals, classify's labels ('all': every "
                 "label; left out: the best one, in transformers' flat shape), qa's answers."}


def _bulk_option(name: str, by_task: dict[str, click.Option]) -> click.Option:
    """`run`'s spelling of a task option: the tasks' flag, no default of its own (the task's
    applies), the tasks' type when they agree."""
    first = next(iter(by_task.values()))
    cmds = ", ".join(TASKS[t].command for t in by_task)
    defaults = "; ".join(f"{TASKS[t].command} {p.default}" for t, p in by_task.items()
                         if isinstance(p.default, (str, int, float))
                         and not (p.is_flag and p.default is False))
    helps = HELP.get(name) or next((p.help for p in by_task.values() if p.help), "")
    text = f"[{cmds}] {helps}" + (f" [default: {defaults}]" if defaults else "")
    if first.is_flag:
        decl = "/".join([_shown(first)[0], *first.secondary_opts])
        return click.Option([decl, name], is_flag=True, default=None, help=text)
    same = all(repr(p.type) == repr(first.type) for p in by_task.values())
    metavar = next((p.metavar for p in by_task.values() if p.metavar), None)
    return click.Option([*_shown(first), name], type=first.type if same else click.STRING,
                        default=None, metavar=metavar, help=text)


def _task_flags(f):
    for name, by_task in reversed(TASK_FLAGS.items()):
        f.__click_params__ = [*getattr(f, "__click_params__", []), _bulk_option(name, by_task)]
    return f


def _flag(name: str) -> str:
    return _shown(next(iter(TASK_FLAGS[name].values())))[0]


def task_params(ctx: click.Context, task: str, values: dict) -> dict:
    """The pipeline's arguments: the options given (the pipeline's defaults, the export's own
    included, apply to the rest, as on the task's command)."""
    mine = [p.name for p in cli_parameters(task)]
    given = given_options(ctx, TASK_FLAGS)
    stray = sorted(given - set(mine))
    cli = TASKS[task].command
    if stray:
        raise InputError(f"{_flag(stray[0])} is not an option of {cli} (the export's task is "
                         f"{task})", f"{cli} takes {', '.join(_flag(n) for n in mine)}")
    typed = {}
    for n in given:
        try:
            typed[n] = TASK_FLAGS[n][task].type_cast_value(ctx, values[n])
        except click.BadParameter as e:
            raise click.BadParameter(e.message, ctx, param_hint=_flag(n)) from e
    return pipeline_kwargs(task, typed, given)


def fields_of(items: tuple[str, ...], pair: str | None, pipeline: type) -> dict[str, str]:
    """--field NAME=COLUMN (and classify's --pair COLUMN) -> {field: column}."""
    allowed = (ID, *pipeline.row_fields)
    fields = {}
    for item in items:
        name, sep, column = item.partition("=")
        if not sep or not column or name not in allowed:
            raise InputError(f"--field {item!r} names no field of {pipeline.task}",
                             f"use NAME=COLUMN with NAME one of {', '.join(allowed)}")
        fields[name] = column
    if pair is not None:
        if "text_pair" not in allowed:
            raise InputError(f"--pair is an option of classify, not of {pipeline.task}",
                             "leave it out")
        fields["text_pair"] = pair
    return fields


@click.command("run")
@inference_options
@click.option("--input", "input_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL, CSV with a header, plain text lines, or Parquet.")
@click.option("--output", "output_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, path_type=Path),
              help="JSONL (.jsonl, .ndjson) or Parquet (.parquet, .pq), by FILE's "
                   "extension; one row per input row (blank lines skipped).")
@click.option("--input-format", type=click.Choice(FORMATS), default=None,
              help="The input's format [default: by extension; else sniffed].")
@click.option("--field", "field_items", multiple=True, metavar="NAME=COLUMN",
              help="Read field NAME (id, text, text_pair, question, context) from COLUMN.")
@click.option("--pair", default=None, metavar="COLUMN",
              help="[classify] The column of each row's second text [default: text_pair].")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None,
              help=f"Rows read, run and committed together [default: {CHUNK_SIZE}; with "
                   "--resume, the stopped job's].")
@click.option("--on-error", type=click.Choice(ON_ERROR), default="row", show_default=True,
              help='A bad row: write {"id", "error"} and go on, or stop (exit 1).')
@click.option("--max-errors", type=click.IntRange(min=0), default=0, show_default=True,
              help="Error rows tolerated: past them the job exits 1 (the output still holds "
                   "every row).")
@click.option("--resume", is_flag=True, help="Finish a job that stopped (same flags).")
@click.option("--force", is_flag=True, help="Replace the output (and any stopped job).")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Progress on stderr: a bar on a terminal, lines otherwise.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
              help="Run on a Ray cluster (Ray Data, one pipeline per actor; --threads each, "
                   "default 1): its address, or auto. Same output. Needs bertonnx[ray].")
@click.option("--actors", type=click.IntRange(min=1), default=None,
              help="[--ray] Actors (pipelines) [default: the cluster's CPUs // --threads].")
@click.option("--streams", default="auto", show_default=True, metavar="auto|N",
              callback=lambda ctx, param, value: read_streams(value),
              help="Model calls at once, the threads split between them: auto is the engine's "
                   "choice for throughput (OpenVINO: 2; the CPU provider: 1).")
@_task_flags
@click.pass_context
def run(ctx, folder, threads, providers, batch_size, as_json, input_path, output_path,
        input_format, field_items, pair, chunk_size, on_error, max_errors, resume, force,
        progress, ray_address, actors, streams, **task_values):
    """Run the export in DIR over every row of --input into --output, in chunks: committed as
    they go, resumable with --resume, a bad row an error row; on one machine, or with --ray
    on a Ray cluster."""
    cluster = None
    if ray_address is not None:
        from .ray_job import RayOptions  # one line naming the extra when ray is missing

        cluster = RayOptions(ray_address, actors)
    elif actors is not None:
        raise InputError("--actors is an option of --ray", "pass --ray ADDRESS, or leave it out")
    pipe = load(folder, providers=providers, threads=threads, batch_size=batch_size,
                streams=streams, bulk=True)
    params = task_params(ctx, pipe.task, task_values)
    fields = fields_of(field_items, pair, type(pipe))
    summary = run_job(pipe, JobOptions(
        input_path, output_path, params, fields, input_format, chunk_size, on_error, resume,
        force, progress, max_errors=max_errors), cluster)
    click.echo(json.dumps(summary.as_dict()) if as_json else summary.line())
    summary.check()
