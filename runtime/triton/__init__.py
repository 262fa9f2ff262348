"""bertonnx.runtime.triton — Triton Inference Server model repositories for exports."""
from .repository import KINDS, TritonOptions, write_repository

__all__ = ["KINDS", "TritonOptions", "write_repository"]
