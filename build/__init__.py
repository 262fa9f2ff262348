"""bertonnx.build — the scratch PyTorch BERT, its heads, HF checkpoint IO, tokenizer, training."""
from bertonnx.runtime.core.tokenizer import WordPieceTokenizer, load_tokenizer

from .checkpoint import (LoadedCheckpoint, default_model_dir, load_checkpoint, load_pretrained,
                         save_pretrained)
from .config import PRESETS, BertConfig, preset
from .heads import TASKS, Bert, build_model

__all__ = ["BertConfig", "PRESETS", "preset", "Bert", "build_model", "TASKS", "load_pretrained",
           "load_checkpoint", "LoadedCheckpoint", "save_pretrained", "default_model_dir",
           "load_tokenizer", "WordPieceTokenizer"]
