"""The `BertOnnxError` family: every user mistake becomes one of these.

Lives in the torch-free runtime package so that build, export and runtime can all raise the
same types (the dependency direction runtime <- export <- build is kept: this module imports
nothing). The CLI turns them into one line on stderr; `exit_code` is the process status.
"""
from __future__ import annotations


class BertOnnxError(Exception):
    """Base class. `str(err)` is the one line shown to the user: the problem, then the fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem} — {fix}" if fix else problem)


class InputError(BertOnnxError):
    """Bad user input: empty text, no mask token, unreadable file, bad argument value.

    `index`: which input of the call is at fault, when one is (the server then fails only the
    request that sent it and keeps its batch-mates in one merged call); `parameter`: the
    keyword argument at fault, when one is."""

    def __init__(self, problem: str, fix: str | None = None, *, index: int | None = None,
                 parameter: str | None = None):
        super().__init__(problem, fix)
        self.index = index
        self.parameter = parameter


class ConfigError(BertOnnxError):
    """A configuration that cannot be built: unknown preset, activation, non-BERT checkpoint."""


class ArtifactError(BertOnnxError):
    """A model folder or export that is missing, damaged, foreign or incomplete."""


class TaskMismatchError(BertOnnxError):
    """The artifact was built for another task than the one asked for."""


class UntrainedHeadError(BertOnnxError):
    """An export whose task head the checkpoint did not train (initialised at random, or the
    head of another task), refused unless the user says it is meant for fine-tuning."""


class CheckFailed(BertOnnxError):
    """A check ran and failed (parity outside tolerance, fusion incomplete)."""

    exit_code = 1


def lookup(table, key, what: str, error: type[BertOnnxError] = InputError,
           choices: str = "use one of"):
    """`table[key]`, or one `error` line naming what is known: "unknown WHAT 'key' — use one
    of a, b, c" (the declarative tables: precisions, int8 recipes, CPU targets)."""
    try:
        return table[key]
    except KeyError:
        raise error(f"unknown {what} {key!r}", f"{choices} {', '.join(table)}") from None
