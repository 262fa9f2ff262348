"""A task head the checkpoint did not train: the manifest's `untrained_head` record, the line
that describes it, export's refusal and the one warning `load` (and so `serve`) gives.

The record (export writes it, from build's LoadedCheckpoint) is {} for a head the checkpoint
trained for the task, else any of:

    initialised  HF names of weights drawn at export (seed 0), not loaded: the checkpoint has no
                 such head (an encoder or MLM checkpoint exported for question answering)
    trained_for  the task config.json's architectures name, when the head loaded was trained
    other_task   for it (a sequence classifier's `classifier` read as a token classifier's)

Such an export answers nonsense until the head is fine-tuned, so export refuses it without
`--allow-untrained-head`, and loading one says so once per folder and process.
"""
from __future__ import annotations

import logging
from pathlib import Path

from .errors import UntrainedHeadError
from .once import first_time

log = logging.getLogger("bertonnx")


def _names(names: list[str], most: int = 4) -> str:
    more = f" (+{len(names) - most} more)" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def describe(record: dict, task: str) -> str:
    """What is untrained in one clause, e.g. "its question-answering head was initialised at
    random, not loaded (qa_outputs.weight, qa_outputs.bias)"."""
    parts = []
    if record.get("other_task"):
        parts.append(f"its {task} head is the checkpoint's {record.get('trained_for', 'other')} "
                     f"head ({_names(record['other_task'])})")
    if record.get("initialised"):
        parts.append(f"{'its' if not parts else 'and'} {task} head weights "
                     f"{_names(record['initialised'])} were initialised at random, not loaded")
    return " ".join(parts)


def refusal(source: str, record: dict, task: str) -> UntrainedHeadError:
    """Export's one line when the head is untrained and the user did not allow it."""
    return UntrainedHeadError(
        f"{source} has no trained {task} head: {describe(record, task)}",
        f"pass --allow-untrained-head if you mean to fine-tune it, or export a checkpoint "
        f"trained for {task}")


def warn_untrained_head(folder: Path, record: dict, task: str) -> bool:
    """One warning per export folder and process when its head is untrained; True when it
    warned."""
    if not record:
        return False
    if not first_time("untrained-head", Path(folder).resolve()):
        return False
    log.warning("%s was exported with --allow-untrained-head: %s; its answers mean nothing "
                "until the head is fine-tuned", folder, describe(record, task))
    return True
