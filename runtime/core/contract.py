"""The export contract, declared once: graph input names and dynamic axes, each task's graph
outputs (from its record, tasks.py), tolerances, the parity grid and the artifact names.

Used by export (to name and shape the graph), parity (what to compare, how closely), the
manifest (what is recorded), Triton (output dims), the heads (transformers class) and the
runtime (what to feed, which pipeline). Reference: optimum's
`BertOnnxConfig`. Lives in the torch-free runtime so the runtime can use it without export.
"""
from __future__ import annotations

from types import MappingProxyType

from .families import DEFAULT_MODEL_TYPE, FAMILIES, family
from .tasks import BATCH, SEQUENCE, TASKS

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # all int64
INPUT_DTYPE = "int64"
INPUT_AXES = MappingProxyType({0: BATCH, 1: SEQUENCE})

# Pretraining classes whose checkpoints serve a task (families.py `pretraining_serves`): the
# MLM half of BERT's and ALBERT's, and ELECTRA's discriminator encoder.
PRETRAINING_ARCHITECTURES = MappingProxyType({
    f.class_prefix + "ForPreTraining": f.pretraining_serves for f in FAMILIES.values()
    if f.pretraining_serves})


def hf_class(task: str, model_type: str = DEFAULT_MODEL_TYPE) -> str:
    """The transformers class of `task` in a family (its row in families.py), e.g.
    ("fill-mask", "roberta") -> RobertaForMaskedLM."""
    return family(model_type).class_prefix + TASKS[task].hf_suffix


# transformers class name -> the task its checkpoints serve, for every family. Torch-free, so a
# folder's task can be told from its config.json `architectures` without the build package.
# Several tasks run on one class (a ForSequenceClassification serves text-classification,
# reranking and zero-shot): the first record in TASKS names the class's task; the others are
# chosen by the folder (a CrossEncoder's files) or by --task.
ARCHITECTURE_TASKS = MappingProxyType({
    **{hf_class(t, m): t for t in reversed(TASKS) for m in FAMILIES},
    **PRETRAINING_ARCHITECTURES})


def task_of_architectures(architectures) -> str | None:
    """The one task config.json's `architectures` names, or None (none, several, unknown)."""
    tasks = set()
    for a in architectures if isinstance(architectures, list) else []:
        if isinstance(a, str) and a in ARCHITECTURE_TASKS:
            tasks.add(ARCHITECTURE_TASKS[a])
    return tasks.pop() if len(tasks) == 1 else None


def output_names(task: str) -> tuple[str, ...]:
    return TASKS[task].output_names


def graph_inputs(type_vocab_size: int) -> tuple[str, ...]:
    """The inputs a model's graph takes: token_type_ids only where there is more than one
    token type. DistilBERT has none; RoBERTa's single type adds the same row to every token,
    so its graphs (as Optimum's and transformers.js's) take input_ids and attention_mask."""
    return INPUT_NAMES if type_vocab_size > 1 else INPUT_NAMES[:2]


def dynamic_axes(task: str, inputs: tuple[str, ...] = INPUT_NAMES) -> dict[str, dict[int, str]]:
    axes = {name: dict(INPUT_AXES) for name in inputs}
    axes.update({name: dict(ax) for name, ax in TASKS[task].outputs})
    return axes


# Tolerances (absolute). fp32 ORT vs torch is compared on unpadded positions only.
FP32_ATOL = 1e-4        # onnxruntime fp32 (fused or not) vs our torch model, every output
HF_ATOL = 1e-5          # our torch model vs transformers' torch model
FP16_ATOL = 5e-2        # fp16 graph (GPU providers) vs torch fp32, relative to output scale
# bf16 arithmetic (OpenVINO on AMX-BF16, runtime/core/engines.py) is judged by the cosine of
# each unpadded token's output row to torch fp32 over the parity grid: the accuracy a retrieval
# user expects of bf16 (sentence-transformers' OpenVINO backend: 0.99999 on MiniLM)
BF16_MIN_MEAN_COSINE = 0.9999
# int8 is judged by task agreement on real text, not by atol:
INT8_MIN_AGREEMENT = 0.9   # top-1 / argmax / exact-span agreement with fp32 torch, fraction
# ... and OpenVINO's static int8 graph (export/openvino_int8.py), which `auto` prefers to the
# int8 export where it passed, also by CTranslate2's int8 accuracy where the task's vectors are
# compared by cosine (issue 41: mean >= 0.995, worst >= 0.99 to fp32 torch)
INT8_MIN_MEAN_COSINE = 0.995
INT8_MIN_COSINE = 0.99

# The shapes parity runs over: (batch, sequence), right padded with random row lengths; "max" =
# the longest sequence the position table covers. Every batch size meets every short length;
# the longest runs at batches 1 and 2. (7, max) was dropped: on a 512-position model it was 65%
# of the grid's tokens (half of a bert-base export's time) and covered nothing that (2, max)
# and (7, 33) do not — every position, a padded row at full length, a batch of 7 padded rows.
PARITY_SHAPES = tuple((b, s) for b in (1, 2, 7) for s in (1, 5, 33)) + ((1, "max"), (2, "max"))

MANIFEST_NAME = "bertonnx.json"
# The newest manifest schema this runtime reads; what each version adds, and which exports
# are written with it: manifest.py `written_version`.
MANIFEST_VERSION = 2
MODEL_NAME = "model.onnx"
