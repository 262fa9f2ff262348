"""The weight settings of onnxruntime's int8 quantizers (quantize_dynamic, quantize_static), as
one frozen record, and the default: what the recipes (recipes.py) and the conversions
(quantize.py) share, and what `ExportOptions(int8=...)` takes."""
from __future__ import annotations

from dataclasses import dataclass

from bertonnx.runtime.core.errors import InputError

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


# Dynamic int8 with no settings given. Chosen by `python -m bertonnx.bench.int8_study` on an
# AVX2 CPU without VNNI (evidence.toml, [default_settings]): QInt8 weights take MLAS's u8s8
# kernels, ~15% faster than u8u8 there, but without VNNI those kernels sum uint8×int8 pairs in
# int16 (vpmaddubsw) and saturate on full-range weights; 7-bit weights (reduce_range) remove
# that at no speed cost, and per-channel scales recover what 7 bits lose.
DEFAULT_INT8 = Int8Settings(per_channel=True, weight_type="QInt8", reduce_range=True)
