"""The `bertonnx` command: a click group whose subcommands are imported only when run.

Inference commands live in torch-free modules, so `bertonnx fill-mask` never imports torch;
export and training commands import torch when (and only when) they run. Every
`BertOnnxError` becomes one line on stderr with its exit code; `--debug` shows the traceback.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util  # `import importlib` alone does not bind importlib.util (wheel installs)
import logging
import sys
from dataclasses import dataclass

import click

from ..core.errors import BertOnnxError, ConfigError
from ..core.tasks import TASKS


@dataclass(frozen=True)
class Command:
    target: str              # "module:attr", a click.Command imported only when the command runs
    summary: str             # the line `bertonnx --help` shows, without importing the module
    extra: str | None = None  # the pip extra whose packages it needs


# Each extra's packages, probed with find_spec on top-level names (which imports nothing).
EXTRAS = {"torch": ("torch", "safetensors", "onnx"),
          "serve": ("starlette", "uvicorn", "orjson")}

COMMANDS = {
    "demo": Command("bertonnx.export.commands:demo",
                    "Export the bundled MiniLM and show its parity and answers.", "torch"),
    "export": Command("bertonnx.export.commands:export",
                      "Export a checkpoint to fused (int8/fp16) ONNX with a parity report.",
                      "torch"),
    "parity": Command("bertonnx.export.commands:parity",
                      "Check an export against its torch reference.", "torch"),
    "adopt": Command("bertonnx.export.commands:adopt",
                     "Make an ONNX folder from Optimum or transformers.js a verified export.",
                     "torch"),
    "bench": Command("bertonnx.bench.commands:bench",
                     "Measure an export: throughput, latency, cold start, size."),
    "export-triton": Command("bertonnx.runtime.cli.commands:export_triton",
                             "Write a Triton model repository entry for an export."),
    # each task's command, from its record (runtime/core/tasks.py)
    **{t.command: Command(f"bertonnx.runtime.cli.commands:{t.command.replace('-', '_')}",
                          t.summary) for t in TASKS.values()},
    "run": Command("bertonnx.runtime.bulk.commands:run",
                   "Run a task over a file (JSONL, CSV, text, Parquet); resumable."),
    "serve": Command("bertonnx.runtime.server.commands:serve",
                     "Serve an export over HTTP with dynamic batching.", "serve"),
    "train-tokenizer": Command("bertonnx.build.commands:train_tokenizer",
                               "Learn a WordPiece vocabulary from text files.", "torch"),
    "pretrain": Command("bertonnx.build.commands:pretrain",
                        "Pretrain a BERT with masked-LM (and NSP).", "torch"),
    "finetune": Command("bertonnx.build.commands:finetune",
                        "Fine-tune a checkpoint for classification, tokens or QA.", "torch"),
}


@functools.cache
def _installed(extra: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in EXTRAS[extra])


def missing_extra(name: str) -> str | None:
    """The extra command `name` needs and this install lacks, or None."""
    extra = COMMANDS[name].extra
    return extra if extra and not _installed(extra) else None


def _needs_extra(name: str, extra: str) -> click.Command:
    """Stands in for a command whose extra is not installed: any use, --help included, is
    one line naming the extra."""
    def fail(args):
        raise ConfigError(f"{name} needs the {extra} extra", f"pip install 'bertonnx[{extra}]'")

    return click.Command(name, callback=fail, help=COMMANDS[name].summary, add_help_option=False,
                         params=[click.Argument(["args"], nargs=-1)],
                         context_settings={"ignore_unknown_options": True})


class LazyGroup(click.Group):
    """Lists every command from the table; imports a command's module only to run it."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        extra = missing_extra(name)
        if extra:
            return _needs_extra(name, extra)
        module, attr = COMMANDS[name].target.split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = []
        for name in self.list_commands(ctx):
            extra = missing_extra(name)
            note = f" [needs: pip install 'bertonnx[{extra}]']" if extra else ""
            rows.append((name, COMMANDS[name].summary + note))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="bertonnx")
@click.pass_context
def cli(ctx, debug):
    """bertonnx: BERT from PyTorch to fused, quantized ONNX, served without torch."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="bertonnx: %(levelname)s: %(message)s")
    # the engine advice (one line per process, runtime/core/engines.py) is shown: it names
    # the faster engine this CPU could run and the pip command
    logging.getLogger("bertonnx.engines").setLevel(logging.DEBUG if debug else logging.INFO)


# click >= 8.2 raises this (a UsageError whose message is the whole help) for a bare group
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(msg: str) -> str:
    """Messages that quote user text or a library error may hold newlines; stderr gets one line."""
    return " ".join(part.strip() for part in msg.splitlines() if part.strip())


def main(argv=None) -> int:
    return run_click(cli, argv, "bertonnx")


def run_click(command: click.Command, argv=None, prog_name: str = "bertonnx") -> int:
    """Run a click command as `bertonnx` runs: a user's mistake is one line on stderr and an exit
    code, never a traceback (the bench's `python -m` entries run through here too)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = command.main(args=argv, standalone_mode=False, prog_name=prog_name)
    except BertOnnxError as e:
        if debug:
            raise
        click.echo(f"bertonnx: error: {_one_line(str(e))}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("bertonnx: aborted", err=True)
        return 130
    except _NO_ARGS_IS_HELP as e:  # plain `bertonnx` / `bertonnx CMD`: the help is the answer
        e.show()
        return 2
    except click.ClickException as e:
        if debug:
            raise
        # click's own show() prints usage + a hint + the error on 3-4 lines; keep it to one
        hint = ""
        if isinstance(e, click.UsageError) and e.ctx is not None:
            hint = f" — see `{e.ctx.command_path} --help`"
        click.echo(f"bertonnx: error: {_one_line(e.format_message())}{hint}", err=True)
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("bertonnx: interrupted", err=True)
        return 130
    except OSError as e:
        # a path the user gave cannot be read or written (missing parent, permissions, disk
        # full): their environment, not a bug, so one line; --debug shows where
        if debug:
            raise
        where = f": {e.filename}" if e.filename else ""
        click.echo(f"bertonnx: error: {e.strerror or e}{where} — check the path, its "
                   "permissions and free space", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
