"""bertonnx.runtime — torch-free inference: onnxruntime sessions, task pipelines, CLI, server.

Imports only numpy, onnxruntime and tokenizers. `load` is resolved lazily so that importing
`bertonnx.runtime.core.errors` (done by build and export) does not pull in onnxruntime.
"""
from .core.errors import (ArtifactError, BertOnnxError, CheckFailed, ConfigError, InputError,
                     TaskMismatchError)

__all__ = ["load", "load_tokenizer", "BertOnnxError", "InputError", "ConfigError",
           "ArtifactError", "TaskMismatchError", "CheckFailed"]


def __getattr__(name):
    if name == "load":
        from .core.pipelines import load  # lazy: onnxruntime (see the module docstring)

        return load
    if name == "load_tokenizer":
        from .core.tokenizer import load_tokenizer  # lazy: tokenizers, likewise

        return load_tokenizer
    raise AttributeError(name)
