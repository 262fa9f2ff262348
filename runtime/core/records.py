"""The record types of tasks.py: `Task` (everything bertonnx says about one task), `Param` (one
keyword argument of a task's pipeline, declared once), `Flag` (where the command line spells it
otherwise), and the markers SAME and LEGACY. The table of records itself is tasks.py.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .bounds import MAX_BATCH_SIZE
from .parameters import Rule, integer


class _Same:
    def __repr__(self) -> str:
        return "SAME"


SAME = _Same()  # a CLI default that is the library's


class _Legacy:
    """text-classification's top_k left out: transformers' pre-top_k output shape."""

    def __repr__(self) -> str:
        return "<best label only>"

    def __reduce__(self):  # unpickled (a Ray actor's parameters) as the one LEGACY, not a copy
        return "LEGACY"


LEGACY = _Legacy()


@dataclass(frozen=True)
class Flag:
    """How the command line spells a parameter where it differs from the library: the flag is
    `--` + the name with dashes; `parse` turns the flag's text into the value (comma lists,
    "all"), `options`/`low` narrow what the CLI offers, `old` are hidden older spellings.

    `default` is what --help shows: the library's default (SAME), or its spelling on the
    command line where the library's value has none (None, LEGACY). It is never another
    behaviour: a command passes only the options given, so a left-out one is the pipeline's
    default, the export's own included (tests/runtime/test_entry_points.py)."""

    default: Any = SAME
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    options: tuple[str, ...] | None = None
    low: int | None = None
    negatable: bool = False      # a boolean shown as --x/--no-x (else a plain --x switch)
    old: tuple[str, ...] = ()
    help: str | None = None      # where the CLI's words differ (e.g. its default's shape)


@dataclass(frozen=True)
class Param:
    """One keyword argument of a task's pipeline, declared once."""

    name: str
    rule: Rule                   # type and limits: the pipeline, the server and /v2 check it
    default: Any
    help: str
    flag: Flag | None = Flag()   # None: not a command-line option
    request: bool = True         # a /predict (and bulk) request may set it
    v2: bool | Rule = True       # a /v2 request may set it; a Rule narrows it (ragged outputs)
    # a call must give it (the pipeline refuses a call without it); /openapi.json marks it
    required: bool = False

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


# what every task's call takes beside its own parameters (the server decides batching)
BATCH_SIZE = Param("batch_size", integer(1, MAX_BATCH_SIZE, none=True, example=32), None,
                   "Sequences per onnxruntime call (the pipeline's own when left out).",
                   flag=None, request=False, v2=False)


@dataclass(frozen=True)
class Task:
    """Everything bertonnx says about one task."""

    name: str                    # also transformers' pipeline task name
    aliases: tuple[str, ...]     # transformers' other names for the task
    head: str                    # the build side's head on the encoder (build/heads.py HEADS)
    hf_suffix: str               # transformers class of the task, less the family's prefix
    outputs: tuple               # ((graph output name, dynamic axes), ...) in the model's order
    # The output's one fixed (non-batch, non-sequence) axis and the config.json field that
    # sizes it; Triton needs the number when the graph leaves the axis symbolic.
    fixed_axis: tuple[int, str] | None
    command: str                 # the `bertonnx` inference command
    summary: str                 # its one line in `bertonnx --help`
    pipeline: str                # "module:Class" under bertonnx.runtime.core.pipelines
    inputs: tuple[str, ...]      # the fields of one input (a table row's columns, v2 tensors)
    params: tuple[Param, ...] = field(default=())
    _: KW_ONLY
    # build/losses.py loss_items (via build/heads.py TaskSpec): the loss is a mean over tokens
    per_token: bool
    # export/agreement.py MEASURES: how an int8 graph's agreement with fp32 is judged
    agreement: str
    # runtime/bulk (job.py, ray.py: a list<float32> column) and bench: the answer is a vector
    vector_output: bool
    # bench/inputs.py task_inputs (and footprint's commands): (text, mask token) -> one input
    example: Callable[[str, str], Any]
    # bench/engines.py: transformers' pipeline is called with truncation=True and max_length
    hf_truncation: bool
    # the parameters that ask the task for unnormalized scores (TEI's `raw_scores`,
    # runtime/server/tei_drop_in.py); empty where it has none
    raw_scores: Mapping[str, Any] = field(default_factory=dict)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.outputs)

    @property
    def parameters(self) -> Mapping[str, Param]:
        """name -> Param, the task's own and batch_size."""
        return MappingProxyType({p.name: p for p in (*self.params, BATCH_SIZE)})

    @property
    def rules(self) -> dict[str, Rule]:
        return {p.name: p.rule for p in self.parameters.values()}

    @property
    def request_parameters(self) -> frozenset[str]:
        """What a /predict request's "parameters" may set."""
        return frozenset(p.name for p in self.params if p.request)

    @property
    def v2_parameters(self) -> dict[str, Rule | None]:
        """What a /v2 request's "parameters" may set: name -> a narrower Rule, or None."""
        return {p.name: p.v2 if isinstance(p.v2, Rule) else None
                for p in self.params if p.v2 is not False}

    def complete(self, params: Mapping) -> dict:
        """`params` with every parameter left out at its default (names already checked)."""
        return {name: params.get(name, p.default) for name, p in self.parameters.items()}

    def unknown(self, params: Mapping) -> list[str]:
        return sorted(set(params) - set(self.parameters))

    def output_problems(self, shapes: dict[str, list], config: dict) -> list[str]:
        """What is wrong with a graph's outputs (`shapes`: name -> declared shape) for this
        task: a missing output, the wrong rank (a fill-mask graph's (B, T, V) logits read as a
        classifier's (B, L)), or a fixed axis config.json sizes otherwise."""
        problems = []
        for name, axes in self.outputs:
            if name not in shapes:
                problems.append(f"no output {name}")
                continue
            rank = max([*axes, *(self.fixed_axis[:1] if self.fixed_axis else ())]) + 1
            shape = shapes[name]
            if len(shape) != rank:
                problems.append(f"{name} has {len(shape)} axes, not {rank}")
            elif self.fixed_axis is not None:
                axis, field_ = self.fixed_axis
                want = config.get(field_)
                if field_ == "num_labels" and want is None and isinstance(config.get("id2label"),
                                                                          dict):
                    want = len(config["id2label"])
                if isinstance(shape[axis], int) and isinstance(want, int) and shape[axis] != want:
                    problems.append(f"{name} axis {axis} is {shape[axis]}, config.json's "
                                    f"{field_} {want}")
        return problems
