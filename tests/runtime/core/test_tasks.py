"""The task records (runtime/core/tasks.py) and what is derived from them: the pipeline call's
defaults and checks, the CLI's options, the bulk job's flags, the server's accepted request
parameters and /v2 parameters, and the build side's heads."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import click
import pytest

from bertonnx.runtime import ConfigError, InputError
from bertonnx.runtime.bulk.commands import TASK_FLAGS
from bertonnx.runtime.cli import COMMANDS
from bertonnx.runtime.cli.commands import TASK_COMMANDS, cli_default, cli_parameters
from bertonnx.runtime.core.contract import output_names
from bertonnx.runtime.core.pipelines import PIPELINES
from bertonnx.runtime.core.tasks import (EXPORT_TASKS, LEGACY, OUTPUTS, SAME, TASK_ALIASES, TASKS,
                                         pipeline_class, task_record)
from bertonnx.runtime.server.protocol import allowed_parameters


@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_each_task_has_one_record_that_names_its_pipeline(task):
    r = TASKS[task]
    assert r.name == task and pipeline_class(task).task == task
    assert PIPELINES[task] is pipeline_class(task) and PIPELINES[task].spec is r
    assert r.output_names == output_names(task) == tuple(n for n, _ in OUTPUTS[task])


def test_commands_are_the_records_commands():
    for r in TASKS.values():
        c = COMMANDS[r.command]
        assert c.target.startswith("bertonnx.runtime.cli.commands:") and c.summary == r.summary
        assert TASK_COMMANDS[r.name].name == r.command


def test_aliases_name_their_task_and_unknown_tasks_are_one_clear_error():
    assert TASK_ALIASES == {"sentiment-analysis": "text-classification",
                            "ner": "token-classification"}
    assert task_record("ner") is TASKS["token-classification"]
    with pytest.raises(ConfigError, match="unknown task 'summarize'.*use one of fill-mask"):
        task_record("summarize")


def test_heads_are_the_records_heads():
    # bertonnx.build is torch: only where a test reads it (the others here are torch-free)
    from bertonnx.build.heads import HEADS, OWN_HEADS
    from bertonnx.build.heads import TASKS as SPECS
    from bertonnx.runtime.core.families import FAMILIES

    for task, r in TASKS.items():
        spec = SPECS[task]
        assert spec.hf_suffix == r.hf_suffix
        assert r.head in HEADS, task
        # the spec builds the record's head from each family's own table (ModernBERT's heads),
        # and names exactly the families whose table has it
        for row in FAMILIES.values():
            has = r.head in OWN_HEADS.get(row.heads, HEADS)
            assert has == (spec.model_types is None or row.model_type in spec.model_types), \
                (task, row.model_type)


def test_triton_fixed_axes_size_the_non_sequence_output_axis():
    for r in TASKS.values():
        if r.fixed_axis is None:   # QA: both outputs are (batch, sequence)
            assert all(set(ax.values()) == {"batch", "sequence"} for _, ax in r.outputs)
            continue
        axis, key = r.fixed_axis
        (_, axes), = r.outputs
        assert axis not in axes and key in ("vocab_size", "num_labels", "hidden_size")


# ---------------------------------------------------------------- derived: the command line

@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_each_cli_option_is_a_parameter_with_its_default_and_bounds(task):
    command = TASK_COMMANDS[task]
    options = {p.name: p for p in command.params if isinstance(p, click.Option)}
    for p in cli_parameters(task):
        o = options[p.name]
        assert p.option in o.opts
        assert o.default == (cli_default(p) if p.rule.kind != "bool" else bool(cli_default(p)))
        if p.rule.kind == "int" and p.flag.parse is None:
            assert o.type.min == (p.flag.low if p.flag.low is not None else p.rule.low)
        if p.rule.kind == "choice":
            assert set(o.type.choices) <= set(p.rule.options)
    # nothing else: the shared flags and the inputs are the only other options
    shared = {"threads", "providers", "batch_size", "as_json", "input_file", "text_pair",
              "question", "context", "query"}
    assert set(options) - shared == {p.name for p in cli_parameters(task)}


def test_a_cli_default_only_spells_the_librarys():
    """Issue 31, one default per parameter: a Flag default other than SAME is the library's
    default as the command line spells it (None and LEGACY have no spelling); that it answers
    as the option left out is tests/runtime/test_entry_points.py's check."""
    spelled = {(t, p.name): p.flag.default for t, r in TASKS.items() for p in r.params
               if p.flag is not None and p.flag.default is not SAME}
    assert spelled == {("text-classification", "top_k"): None,
                       ("text-classification", "function_to_apply"): "default",
                       ("token-classification", "ignore_labels"): "O"}
    assert TASKS["text-classification"].parameters["top_k"].default is LEGACY
    assert TASKS["text-classification"].parameters["function_to_apply"].default is None
    assert TASKS["token-classification"].parameters["ignore_labels"].default is None
    # unit vectors by default, on the command line as in the library
    assert TASKS["feature-extraction"].parameters["normalize"].default is True


def test_bulk_flags_are_the_task_commands_options():
    for task in TASKS:
        for p in cli_parameters(task):
            assert task in TASK_FLAGS[p.name]


# ---------------------------------------------------------------- derived: the server

@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_server_parameters_are_the_records(task):
    r = TASKS[task]
    allowed = allowed_parameters(type("P", (), {"task": task}))
    assert allowed == {p.name for p in r.params if p.request}
    assert "batch_size" not in allowed and "return_tensors" not in allowed
    assert set(PIPELINES[task].tensors.parameters) == {p.name for p in r.params if p.v2 is not False}
    assert set(PIPELINES[task].tensors.parameters) <= allowed


# ---------------------------------------------------------------- derived: the pipeline call

@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_predict_takes_exactly_the_records_parameters(task):
    names = [n for n in inspect.signature(PIPELINES[task].predict).parameters
             if n not in ("self", "read")]
    assert names == list(TASKS[task].parameters)


def test_a_call_fills_in_defaults_and_checks_rules():
    cls = PIPELINES["fill-mask"]
    seen = {}

    class Fake(cls):
        def __init__(self):  # no model: only the call's parameter handling is under test
            self.defaults = TASKS["fill-mask"].complete({})

        def read_inputs(self, inputs):
            return inputs

        def predict(self, read, **params):
            seen.update(params)
            return read

    fake = Fake()
    assert fake("x [MASK]", top_k=2) == "x [MASK]"
    assert seen == {"top_k": 2, "targets": None, "batch_size": None}
    with pytest.raises(InputError, match="top_k must be an integer from 1"):
        fake("x [MASK]", top_k=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'topk'"):
        fake("x [MASK]", topk=2)


# ------------------------------------------------ what else reads the record (issue 26's rules)

def test_the_records_other_readers_fields():
    # bertonnx.build and bertonnx.export are torch: lazy, as above
    from bertonnx.build.heads import TASKS as SPECS
    from bertonnx.export.agreement import MEASURES

    for task, r in TASKS.items():
        assert SPECS[task].per_token is r.per_token  # the loss's average (losses.loss_items)
        assert r.agreement in MEASURES
        # the bench's sample input is one the task's pipeline reads
        one = r.example("alpha beta gamma delta", "[MASK]")
        assert len(pipeline_class(task).read_inputs(one).records) == 1
        assert set(one) == set(r.inputs) if isinstance(one, dict) else isinstance(one, str)
    assert SPECS["pretraining"].per_token
    assert [t for t, r in TASKS.items() if r.vector_output] == ["feature-extraction"]
    assert TASKS["fill-mask"].example("one two three four", "<mask>") == "one two <mask> four"


REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("build", "export", "runtime", "bench")


def _modules():
    return [p for d in PACKAGES for p in sorted((REPO / d).rglob("*.py"))]


def test_task_name_branches_sit_in_at_most_three_files():
    """Issue 26: what a task does is read from its record or its pipeline, not switched on by
    name — a comparison (==, !=, in, not in) with a task's name (or alias, or the build-only
    "pretraining") as a string literal is allowed in at most three files."""
    names = {n for r in TASKS.values() for n in (r.name, *r.aliases)} | {"pretraining"}
    ops = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
    found = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(isinstance(o, ops) for o in node.ops):
                if any(isinstance(c, ast.Constant) and c.value in names
                       for side in (node.left, *node.comparators) for c in ast.walk(side)):
                    found.setdefault(path.relative_to(REPO).as_posix(), []).append(node.lineno)
    assert len(found) <= 3, f"task-name branches in {len(found)} files: {found}"


@pytest.mark.parametrize("name", ["handle_impossible_answer", "aggregation_strategy",
                                  "function_to_apply"])
def test_a_parameter_is_named_by_its_record_and_its_pipeline_only(name):
    """Issue 26: a task parameter is declared once (tasks.py) and used by its pipeline; the
    CLI, server, bulk and bench read it from the record rather than naming it."""
    naming = [p.relative_to(REPO).as_posix() for p in _modules()
              if name in p.read_text(encoding="utf-8")]
    assert len(naming) <= 2, f"{name} is named in {naming}"
