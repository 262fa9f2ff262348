"""bertonnx.build.train — tokenizer training, MLM/NSP pretraining and fine-tuning.

Each entry point takes one typed config (see config.py); the click commands in
bertonnx.build.commands only map flags onto them.
"""
from .config import FINETUNE_TASKS, FinetuneConfig, PretrainConfig, TrainConfig
from .masking import mask_tokens
from .finetuning import finetune
from .pretraining import pretrain
from .tokenizer import TokenizerConfig, train_tokenizer

__all__ = ["TrainConfig", "PretrainConfig", "FinetuneConfig", "TokenizerConfig", "FINETUNE_TASKS",
           "pretrain", "finetune", "train_tokenizer", "mask_tokens"]

