"""bertonnx.export — torch -> ONNX: the export contract, fusion, quantization, parity, manifest.

The names below are imported on first use (PEP 562), so a torch-free module of this package
(texts.py) imports without torch.
"""
from __future__ import annotations

import importlib

__all__ = ["ExportOptions", "export_model", "check_parity"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".api", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
