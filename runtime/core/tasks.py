"""Each task, declared once: one `Task` record per task, read by everything else.

A record holds the task's name and aliases, the head the build side puts on the encoder and
the transformers class it maps to, the graph's outputs and their axes, the pipeline class, how
its inputs are read, and every user parameter (`Param`: type and limits, default, help, and
where the command line or the server differ). From it come the pipeline call's defaults and
checks (pipelines/base.py), the CLI command and its options (runtime/cli), the bulk job's flags
(runtime/bulk), the server's accepted request parameters and /v2 parameters (runtime/server),
the export's outputs and dynamic axes (export/graph.py via contract.py), the build side's
head and loss average (build/heads.py, losses.py), int8's agreement measure
(export/agreement.py), bulk's vector column and bench's sample inputs. References: optimum's
per-task output table (`TasksManager`), TEI's typed request structs
(router/src/http/types.rs).

Adding a task is adding a record here, its pipeline module under pipelines/, and its tests.
"""
from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .bounds import MAX_BATCH_SIZE
from .errors import ConfigError, InputError
from .parameters import MAX_TOP_K, Rule, boolean, choice, integer, strings, top_k_or_all

BATCH, SEQUENCE = "batch", "sequence"
# The options of the parameters below (postprocess.py implements each)
FUNCTIONS = ("default", "sigmoid", "softmax", "none")             # text-classification
AGGREGATIONS = ("none", "simple", "first", "average", "max")      # token-classification
POOLINGS = ("mean", "cls", "none")                                # feature-extraction
_BS = MappingProxyType({0: BATCH, 1: SEQUENCE})
_B = MappingProxyType({0: BATCH})


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


def _words(value: str) -> list[str]:
    """fill-mask's --targets: comma-separated words (none at all is refused: it would score
    nothing, and leaving the option out scores the whole vocabulary)."""
    words = [t.strip() for t in value.split(",") if t.strip()]
    if not words:
        raise InputError(f"--targets must name at least one word, got {value!r}",
                         "pass comma-separated words, e.g. --targets cat,dog, or leave it out "
                         "to score the whole vocabulary")
    return words


def _labels(value: str) -> list[str]:
    """tokens' --ignore-labels: comma-separated labels ('' ignores none)."""
    return [x for x in value.split(",") if x]


def _text(text: str, mask_token: str) -> str:
    """An input that is the text itself."""
    return text


def _masked(text: str, mask_token: str) -> str:
    """fill-mask's input: the text with its middle word masked."""
    words = text.split()
    words[len(words) // 2] = mask_token
    return " ".join(words)


def _question(text: str, mask_token: str) -> dict:
    """question-answering's input: the text as the context, its first six words the question."""
    return {"question": " ".join(text.split()[:6]) + "?", "context": text}


def _top_k_or_all(value: str | None):
    """classify's --top-k: left out -> transformers' flat shape, 'all' -> every label."""
    if value is None:
        return LEGACY
    if value == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_TOP_K:
        raise InputError(f"--top-k must be an integer from 1 to {MAX_TOP_K} or 'all', got "
                         f"{value!r}", "pass --top-k 3")
    return n


TASKS: Mapping[str, Task] = MappingProxyType({t.name: t for t in (
    Task("fill-mask", (), "mlm", "ForMaskedLM", (("logits", _BS),), (2, "vocab_size"),
         "fill-mask", "Predict [MASK] tokens.", "fill_mask:FillMaskPipeline", ("text",), (
        # top_k past the vocabulary (or the targets) gives them all, as many as there are
        Param("top_k", integer(1, MAX_TOP_K, example=5), 5, "Proposals per mask."),
        Param("targets", strings(single=True, words=True), None,
              "Words to score instead of the whole vocabulary.",
              Flag(parse=_words, metavar="WORDS",
                   help="Comma-separated words to score instead of the whole vocabulary.")),
    ), per_token=True, agreement="mask-top1", vector_output=False, example=_masked,
        hf_truncation=False),
    Task("text-classification", ("sentiment-analysis",), "sequence", "ForSequenceClassification",
         (("logits", _B),), (1, "num_labels"), "classify", "Classify texts or text pairs.",
         "text_classification:TextClassificationPipeline", ("text", "text_pair"), (
        # left out: the best label in transformers' legacy shape; None (null): every label
        Param("top_k", top_k_or_all(LEGACY), LEGACY, "Labels per text, sorted.",
              Flag(parse=_top_k_or_all, default=None, metavar="N|all",
                   help="Labels per text, sorted; 'all' for every label [default: the best "
                        "one, in transformers' flat shape]."),
              # one best label per text over /v2: several would make the rows ragged
              v2=False),
        Param("function_to_apply", choice(FUNCTIONS, none=True, fold_case=True), None,
              "Scores from the logits: default follows problem_type and the label count.",
              Flag(default="default", options=FUNCTIONS, old=("--function",))),
    ), per_token=False, agreement="argmax", vector_output=False, example=_text,
        hf_truncation=True),
    Task("token-classification", ("ner",), "token", "ForTokenClassification",
         (("logits", _BS),), (2, "num_labels"), "tokens", "Label tokens (named entities).",
         "token_classification:TokenClassificationPipeline", ("text",), (
        Param("aggregation_strategy", choice(AGGREGATIONS, fold_case=True), "none",
              "How tokens are grouped into words and entities.",
              Flag(options=AGGREGATIONS, old=("--aggregation",))),
        Param("ignore_labels", strings(single=False), None,
              "Labels left out of the answer (default: O).",
              Flag(default="O", parse=_labels, metavar="LABELS",
                   help="Comma-separated labels not to show ('' shows all).")),
        Param("stride", integer(0, lambda pipe: pipe.room - 1, none=True, example=16), None,
              "Token overlap between windows of long texts."),
    ), per_token=True, agreement="token-argmax", vector_output=False, example=_text,
        hf_truncation=False),
    Task("question-answering", (), "span", "ForQuestionAnswering",
         (("start_logits", _BS), ("end_logits", _BS)), None, "qa",
         "Answer questions from a context.", "question_answering:QuestionAnsweringPipeline",
         ("question", "context"), (
        # the best span per question over /v2 (top_k 1): several would make the rows ragged
        Param("top_k", integer(1, MAX_TOP_K), 1, "Answers per question.", v2=False),
        Param("doc_stride", integer(0, none=True, example=128), None,
              "Overlap between context windows (default min(max_seq_len // 2, 128))."),
        Param("max_answer_len", integer(1, example=15), 15, "Longest answer, in tokens."),
        Param("max_seq_len", integer(1, lambda pipe: pipe.max_length, none=True, example=384),
              None, "Tokens per window (default min(model max, 384)).", Flag(low=8)),
        Param("max_question_len", integer(1, example=64), 64, "Longest question, in tokens."),
        Param("handle_impossible_answer", boolean(), False, "Allow the empty answer."),
        Param("align_to_words", boolean(), True, "Answers start and end on word boundaries.",
              Flag(negatable=True)),
    ), per_token=False, agreement="span", vector_output=False, example=_question,
        hf_truncation=False),
    Task("feature-extraction", (), "identity", "Model", (("last_hidden_state", _BS),),
         (2, "hidden_size"), "embed", "Sentence embeddings and cosines.",
         "feature_extraction:FeatureExtractionPipeline", ("text",), (
        # An export made from a sentence-transformers folder defaults to that folder's own
        # pooling and normalize (its Pooling and Normalize modules, recorded at export:
        # FeatureExtractionPipeline.folder_defaults, Manifest.defaults).
        # pooling "none" (a [T, H] matrix per text) would make /v2 rows ragged
        Param("pooling", choice(POOLINGS), "mean",
              "How token vectors become one vector (an export of a sentence-transformers "
              "folder: the folder's by default).",
              Flag(options=("mean", "cls")), v2=choice(("mean", "cls"))),
        # Unit vectors by default, on every entry point: what sentence embeddings are used for
        # (cosine search) and what the other embedding APIs return — OpenAI's embeddings,
        # TEI's /embed (`normalize` defaults to true: router/src/http/types.rs, EmbedRequest)
        # and sentence-transformers models with a Normalize module (all-MiniLM-L6-v2). A
        # sentence-transformers folder without one (a dot-product model) keeps its raw
        # vectors. Raw ones are a parameter away: normalize=False, the same name everywhere.
        Param("normalize", boolean(), True,
              "Unit-length vectors (cosine similarity = dot product; an export of a "
              "sentence-transformers folder: as the folder chose by default).",
              Flag(negatable=True)),
        Param("return_tensors", boolean(), False, "numpy arrays instead of lists.",
              flag=None, request=False, v2=False),
    ), per_token=False, agreement="cosine", vector_output=True, example=_text,
        hf_truncation=False),
)})

EXPORT_TASKS = tuple(TASKS)
# transformers' other names for the same tasks
TASK_ALIASES = MappingProxyType({a: t.name for t in TASKS.values() for a in t.aliases})
# task -> ((output name, dynamic axes), ...), in the order the torch model returns them.
OUTPUTS = MappingProxyType({t: c.outputs for t, c in TASKS.items()})
COMMANDS = MappingProxyType({t.command: t for t in TASKS.values()})


def task_record(task: str) -> Task:
    """The task's record; an alias (e.g. "ner") names its task. ConfigError for unknown ones."""
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}")
    return TASKS[task]


def pipeline_class(task: str) -> type:
    """The task's pipeline class, imported only now (the CLI stays light until it runs)."""
    module, name = task_record(task).pipeline.split(":")
    return getattr(import_module(f"bertonnx.runtime.core.pipelines.{module}"), name)

