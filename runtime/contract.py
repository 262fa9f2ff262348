"""The export contract, declared once: graph input/output names, dynamic axes, tolerances.

Used by export (to name and shape the graph), parity (what to compare, how closely), the
manifest (what is recorded) and the runtime (what to feed). Reference: optimum's
`BertOnnxConfig`. Lives in the torch-free runtime so the runtime can use it without export.
"""
from __future__ import annotations

from types import MappingProxyType

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")  # all int64
INPUT_DTYPE = "int64"
BATCH, SEQUENCE = "batch", "sequence"
INPUT_AXES = MappingProxyType({0: BATCH, 1: SEQUENCE})

# task -> ((output name, dynamic axes), ...), in the order the torch model returns them.
_BS = MappingProxyType({0: BATCH, 1: SEQUENCE})
_B = MappingProxyType({0: BATCH})
OUTPUTS = MappingProxyType({
    "fill-mask": (("logits", _BS),),
    "text-classification": (("logits", _B),),
    "token-classification": (("logits", _BS),),
    "question-answering": (("start_logits", _BS), ("end_logits", _BS)),
    "feature-extraction": (("last_hidden_state", _BS),),
})
EXPORT_TASKS = tuple(OUTPUTS)


def output_names(task: str) -> tuple[str, ...]:
    return tuple(name for name, _ in OUTPUTS[task])


def dynamic_axes(task: str) -> dict[str, dict[int, str]]:
    axes = {name: dict(INPUT_AXES) for name in INPUT_NAMES}
    axes.update({name: dict(ax) for name, ax in OUTPUTS[task]})
    return axes


# Tolerances (absolute). fp32 ORT vs torch is compared on unpadded positions only.
FP32_ATOL = 1e-4        # onnxruntime fp32 (fused or not) vs our torch model, every output
HF_ATOL = 1e-5          # our torch model vs transformers' torch model
FP16_ATOL = 5e-2        # fp16 graph (GPU providers) vs torch fp32, relative to output scale
# int8 is judged by task agreement on real text, not by atol:
INT8_MIN_AGREEMENT = 0.9   # top-1 / argmax / exact-span agreement with fp32 torch, fraction

# The shape grid parity runs over (batch × sequence, right padding); "max" = max positions.
PARITY_BATCHES = (1, 2, 7)
PARITY_SEQUENCES = (1, 5, 33, "max")

MANIFEST_NAME = "bertonnx.json"
MANIFEST_VERSION = 1
MODEL_NAME = "model.onnx"
