"""bertonnx.export — torch -> ONNX: the export contract, fusion, quantization, parity, manifest."""
from .api import ExportOptions, check_parity, export_model

__all__ = ["ExportOptions", "export_model", "check_parity"]
