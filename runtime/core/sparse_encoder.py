"""A sentence-transformers SparseEncoder folder, read: is it a SPLADE model, and how does it pool.

sentence-transformers (5.x, sparse_encoder/) saves a SPLADE model as an MLM-headed encoder and a
SpladePooling module, listed in modules.json:

    5.0-5.3  sentence_transformers.sparse_encoder.models.MLMTransformer  +  ...models.SpladePooling
    5.4+     sentence_transformers.base.modules.transformer.Transformer (transformer_task
             "fill-mask")  +  sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling

and the pooling's choices in its folder's config.json: `pooling_strategy` ("max", the default, or
"sum"), `activation_function` ("relu", the default, or "log1p_relu": OpenSearch's second log1p),
`embedding_dimension` (older: `word_embedding_dimension`; the vocabulary size, not a choice).
A plain ForMaskedLM checkpoint, which SparseEncoder itself turns into Transformer + SpladePooling
with the defaults, pools by the defaults here too. The other sparse architectures (CSR's
SparseAutoEncoder, the inference-free SparseStaticEmbedding, a query/document Router) are
refused by name. Torch-free: the build side (the head's pooling) and export (the task of a
folder) read it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .files import read_json_object
from .sentence_transformers import ENCODERS, read_modules

POOLING_STRATEGIES = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")
# the module class a SPLADE folder lists after its encoder (the last part of modules.json's "type")
_POOLING = "SpladePooling"


@dataclass(frozen=True)
class SpladePooling:
    """SpladePooling's two choices, under sentence-transformers' names."""

    pooling_strategy: str = "max"
    activation_function: str = "relu"

    def __post_init__(self):
        for name, value, options in (("pooling_strategy", self.pooling_strategy,
                                      POOLING_STRATEGIES),
                                     ("activation_function", self.activation_function,
                                      ACTIVATIONS)):
            if value not in options:
                raise ConfigError(f"SpladePooling {name} {value!r} is not supported",
                                  f"use one of {', '.join(options)}")

    def as_dict(self) -> dict:
        return {"pooling_strategy": self.pooling_strategy,
                "activation_function": self.activation_function}


def _modules(folder: Path) -> list[tuple[str, str]] | None:
    """modules.json's (class name, path) pairs; None without the file."""
    listed = read_modules(folder)
    return None if listed is None else [(kind.rsplit(".", 1)[-1], rel) for kind, rel in listed]


def is_splade_folder(folder: str | Path) -> bool:
    """Whether `folder` is a SparseEncoder folder with SpladePooling (its modules.json says so)."""
    modules = _modules(Path(folder))
    return modules is not None and any(kind == _POOLING for kind, _ in modules)


def splade_pooling(folder: str | Path | None) -> SpladePooling:
    """How a model folder's SPLADE vectors pool: its SpladePooling module's choices, or the
    defaults SparseEncoder gives a plain ForMaskedLM checkpoint (no modules.json, or no folder).
    ConfigError for a sparse architecture other than encoder + SpladePooling."""
    if folder is None:
        return SpladePooling()
    folder = Path(folder)
    modules = _modules(folder)
    if modules is None or not any(kind == _POOLING for kind, _ in modules):
        return SpladePooling()
    other = sorted({kind for kind, _ in modules} - set(ENCODERS) - {_POOLING})
    if other:
        raise ConfigError(f"{folder} holds sentence-transformers module(s) {', '.join(other)} "
                          "beside SpladePooling, which bertonnx does not run",
                          "export a SparseEncoder made of an MLM encoder and SpladePooling only")
    path = next(p for kind, p in modules if kind == _POOLING)
    config = folder / path / "config.json"
    if not config.is_file():
        return SpladePooling()
    data = read_json_object(config, "restore the file")
    try:
        return SpladePooling(data.get("pooling_strategy", "max"),
                             data.get("activation_function", "relu"))
    except ConfigError as e:
        raise ConfigError(f"{config}: {e.problem}", e.fix) from None
