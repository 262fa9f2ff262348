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


def main(argv=None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = cli.main(args=argv, standalone_mode=False, prog_name="bertonnx")
    except BertOnnxError as e:
        if debug:
            raise
        click.echo(f"bertonnx: error: {e}", err=True)
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("bertonnx: aborted", err=True)
        return 130
    except click.ClickException as e:
        e.show()
        return 2
    except click.exceptions.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("bertonnx: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
