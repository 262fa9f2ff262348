"""The export contract, declared once: graph input/output names, dynamic axes, tolerances, and
one `TaskContract` record per task (outputs, transformers class, CLI name, pipeline class).

Used by export (to name and shape the graph), parity (what to compare, how closely), the
manifest (what is recorded), Triton (output dims), the heads (transformers class) and the
runtime (what to feed, which pipeline). Reference: optimum's
`BertOnnxConfig`. Lives in the torch-free runtime so the runtime can use it without export.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from .errors import ConfigError

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # all int64
INPUT_DTYPE = "int64"
BATCH, SEQUENCE = "batch", "sequence"
INPUT_AXES = MappingProxyType({0: BATCH, 1: SEQUENCE})

_BS = MappingProxyType({0: BATCH, 1: SEQUENCE})
_B = MappingProxyType({0: BATCH})


@dataclass(frozen=True)
class TaskContract:
    """Everything bertonnx says about one task, in one record (read by the heads, the export,
    the manifest, Triton, the pipelines and the CLI)."""

    task: str                    # also transformers' pipeline task name
    outputs: tuple               # ((graph output name, dynamic axes), ...) in the model's order
    hf_suffix: str               # transformers class of the task, less the family's prefix
    cli_name: str                # the `bertonnx` inference command
    pipeline: str                # "module:Class" under bertonnx.runtime.pipelines
    aliases: tuple[str, ...] = ()  # transformers' other names for the task
    # The output's one fixed (non-batch, non-sequence) axis and the config.json field that
    # sizes it; Triton needs the number when the graph leaves the axis symbolic.
    fixed_axis: tuple[int, str] | None = None

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.outputs)

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
                axis, field = self.fixed_axis
                want = config.get(field)
                if field == "num_labels" and want is None and isinstance(config.get("id2label"),
                                                                         dict):
                    want = len(config["id2label"])
                if isinstance(shape[axis], int) and isinstance(want, int) and shape[axis] != want:
                    problems.append(f"{name} axis {axis} is {shape[axis]}, config.json's "
                                    f"{field} {want}")
        return problems

    @property
    def hf_class(self) -> str:
        """BERT's transformers class for the task (any family's: `hf_class(task, model_type)`)."""
        return HF_CLASS_PREFIXES["bert"] + self.hf_suffix


TASKS = MappingProxyType({c.task: c for c in (
    TaskContract("fill-mask", (("logits", _BS),), "ForMaskedLM", "fill-mask",
                 "fill_mask:FillMaskPipeline", fixed_axis=(2, "vocab_size")),
    TaskContract("text-classification", (("logits", _B),), "ForSequenceClassification",
                 "classify", "text_classification:TextClassificationPipeline",
                 aliases=("sentiment-analysis",), fixed_axis=(1, "num_labels")),
    TaskContract("token-classification", (("logits", _BS),), "ForTokenClassification",
                 "tokens", "token_classification:TokenClassificationPipeline",
                 aliases=("ner",), fixed_axis=(2, "num_labels")),
    TaskContract("question-answering", (("start_logits", _BS), ("end_logits", _BS)),
                 "ForQuestionAnswering", "qa",
                 "question_answering:QuestionAnsweringPipeline"),
    TaskContract("feature-extraction", (("last_hidden_state", _BS),), "Model", "embed",
                 "feature_extraction:FeatureExtractionPipeline", fixed_axis=(2, "hidden_size")),
)})
# model_type -> the prefix of its transformers class names: the families bertonnx loads
# (build/families.py holds their shapes). Torch-free, so a folder's task can be told from its
# config.json `architectures` without the build package.
HF_CLASS_PREFIXES = MappingProxyType({
    "bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
    "distilbert": "DistilBert", "electra": "Electra", "albert": "Albert"})
# Pretraining classes whose checkpoints serve a task: the MLM half of BERT's and ALBERT's (NSP /
# sentence order heads dropped), and ELECTRA's discriminator, whose replaced-token head is no
# bertonnx task but whose encoder is what feature extraction serves.
PRETRAINING_ARCHITECTURES = MappingProxyType({
    "BertForPreTraining": "fill-mask", "AlbertForPreTraining": "fill-mask",
    "ElectraForPreTraining": "feature-extraction"})


# Families whose position ids count from pad_token_id + 1 (RoBERTa's
# create_position_ids_from_input_ids; build/families.py's positions_from_padding).
POSITIONS_FROM_PADDING = frozenset({"roberta", "xlm-roberta", "camembert"})


def usable_positions(config: dict) -> int | None:
    """How many tokens a sequence of the model may hold, from its config.json: the position
    table's size, less the padding offset where the family has one (514 -> 512)."""
    n = config.get("max_position_embeddings")
    if not isinstance(n, int) or isinstance(n, bool):
        return None
    if config.get("model_type") in POSITIONS_FROM_PADDING:
        pad = config.get("pad_token_id")
        n -= (pad if isinstance(pad, int) else 1) + 1
    return n


def hf_class(task: str, model_type: str = "bert") -> str:
    """The transformers class of `task` in a family, e.g. ("fill-mask", "roberta") ->
    RobertaForMaskedLM."""
    return HF_CLASS_PREFIXES[model_type] + TASKS[task].hf_suffix


# transformers class name -> the task its checkpoints serve, for every family
ARCHITECTURE_TASKS = MappingProxyType({
    **{hf_class(t, m): t for t in TASKS for m in HF_CLASS_PREFIXES}, **PRETRAINING_ARCHITECTURES})

# task -> ((output name, dynamic axes), ...), in the order the torch model returns them.
OUTPUTS = MappingProxyType({t: c.outputs for t, c in TASKS.items()})
EXPORT_TASKS = tuple(TASKS)
# transformers' other names for the same tasks
TASK_ALIASES = MappingProxyType({a: c.task for c in TASKS.values() for a in c.aliases})


def task_of_architectures(architectures) -> str | None:
    """The one task config.json's `architectures` names, or None (none, several, unknown)."""
    tasks = set()
    for a in architectures if isinstance(architectures, list) else []:
        if isinstance(a, str) and a in ARCHITECTURE_TASKS:
            tasks.add(ARCHITECTURE_TASKS[a])
    return tasks.pop() if len(tasks) == 1 else None


def task_contract(task: str) -> TaskContract:
    """The task's record; an alias (e.g. "ner") names its task. ConfigError for unknown ones."""
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}")
    return TASKS[task]


def pipeline_class(task: str) -> type:
    """The task's pipeline class, imported only now (the CLI stays light until it runs)."""
    from importlib import import_module

    module, name = task_contract(task).pipeline.split(":")
    return getattr(import_module(f"bertonnx.runtime.pipelines.{module}"), name)


def output_names(task: str) -> tuple[str, ...]:
    return TASKS[task].output_names


def graph_inputs(type_vocab_size: int) -> tuple[str, ...]:
    """The inputs a model's graph takes: token_type_ids only where there is more than one
    token type. DistilBERT has none; RoBERTa's single type adds the same row to every token,
    so its graphs (as Optimum's and transformers.js's) take input_ids and attention_mask."""
    return INPUT_NAMES if type_vocab_size > 1 else INPUT_NAMES[:2]


def dynamic_axes(task: str, inputs: tuple[str, ...] = INPUT_NAMES) -> dict[str, dict[int, str]]:
    axes = {name: dict(INPUT_AXES) for name in inputs}
    axes.update({name: dict(ax) for name, ax in OUTPUTS[task]})
    return axes


# Tolerances (absolute). fp32 ORT vs torch is compared on unpadded positions only.
FP32_ATOL = 1e-4        # onnxruntime fp32 (fused or not) vs our torch model, every output
HF_ATOL = 1e-5          # our torch model vs transformers' torch model
FP16_ATOL = 5e-2        # fp16 graph (GPU providers) vs torch fp32, relative to output scale
# int8 is judged by task agreement on real text, not by atol:
INT8_MIN_AGREEMENT = 0.9   # top-1 / argmax / exact-span agreement with fp32 torch, fraction

# The shapes parity runs over: (batch, sequence), right padded with random row lengths; "max" =
# the longest sequence the position table covers. Every batch size meets every short length;
# the longest runs at batches 1 and 2. (7, max) was dropped: on a 512-position model it was 65%
# of the grid's tokens (half of a bert-base export's time) and covered nothing that (2, max)
# and (7, 33) do not — every position, a padded row at full length, a batch of 7 padded rows.
PARITY_SHAPES = tuple((b, s) for b in (1, 2, 7) for s in (1, 5, 33)) + ((1, "max"), (2, "max"))

MANIFEST_NAME = "bertonnx.json"
MANIFEST_VERSION = 1
MODEL_NAME = "model.onnx"
