"""The `bertonnx` command: a click group whose subcommands are imported only when run.

Inference commands live in torch-free modules, so `bertonnx fill-mask` never imports torch;
export and training commands import torch when (and only when) they run. Every
`BertOnnxError` becomes one line on stderr with its exit code; `--debug` shows the traceback.
"""
from __future__ import annotations

import importlib
import logging
import sys

import click

from .errors import BertOnnxError

# name -> "module:function"; each module's command is a click.Command.
COMMANDS = {
    "demo": "bertonnx.export.commands:demo",
    "export": "bertonnx.export.commands:export",
    "parity": "bertonnx.export.commands:parity",
    "bench": "bertonnx.export.bench:bench",
    "export-triton": "bertonnx.runtime.triton:export_triton",
    "fill-mask": "bertonnx.runtime.commands:fill_mask",
    "classify": "bertonnx.runtime.commands:classify",
    "qa": "bertonnx.runtime.commands:qa",
    "tokens": "bertonnx.runtime.commands:tokens",
    "embed": "bertonnx.runtime.commands:embed",
    "serve": "bertonnx.runtime.server:serve",
    "train-tokenizer": "bertonnx.build.commands:train_tokenizer",
    "pretrain": "bertonnx.build.commands:pretrain",
    "finetune": "bertonnx.build.commands:finetune",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(n for n in COMMANDS if self._available(n))

    @staticmethod
    def _available(name: str) -> bool:
        module = COMMANDS[name].split(":")[0]
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            return False

    def get_command(self, ctx, name):
        if name not in COMMANDS or not self._available(name):
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(package_name="bertonnx")
@click.pass_context
def cli(ctx, debug):
    """bertonnx: BERT from PyTorch to fused, quantized ONNX, served without torch."""
    ctx.obj = {"debug": debug}
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="bertonnx: %(levelname)s: %(message)s")


# click >= 8.2 raises this (a UsageError whose message is the whole help) for a bare group
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(msg: str) -> str:
    """Messages that quote user text or a library error may hold newlines; stderr gets one line."""
    return " ".join(part.strip() for part in msg.splitlines() if part.strip())


def main(argv=None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = cli.main(args=argv, standalone_mode=False, prog_name="bertonnx")
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
