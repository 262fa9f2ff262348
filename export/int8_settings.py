"""The weight settings of onnxruntime's int8 quantizers (quantize_dynamic, quantize_static),
as one frozen record: what export/int8_recipes.py's recipes and export/quantize.py share."""
from __future__ import annotations

from dataclasses import dataclass

from bertonnx.runtime.errors import InputError

WEIGHT_TYPES = ("QInt8", "QUInt8")


@dataclass(frozen=True)
class Int8Settings:
    """quantize_dynamic's (and quantize_static's) weight settings."""
    per_channel: bool = False
    weight_type: str = "QUInt8"
    reduce_range: bool = False

    def __post_init__(self):
        if self.weight_type not in WEIGHT_TYPES:
            raise InputError(f"unknown int8 weight type {self.weight_type!r}",
                             f"use one of {', '.join(WEIGHT_TYPES)}")
