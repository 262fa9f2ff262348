"""Typed settings of a training run: `TrainConfig` (the optimisation loop, shared),
`PretrainConfig` and `FinetuneConfig` (what is trained on what). Flags map onto these 1:1."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertonnx.runtime.core.errors import InputError

FINETUNE_TASKS = ("text-classification", "token-classification", "question-answering")


@dataclass(frozen=True)
class TrainConfig:
    out: Path
    max_steps: int | None = None   # optimizer steps; wins over epochs when set
    epochs: float = 1.0
    batch_size: int = 32           # per process, per micro-batch
    grad_accum: int = 1
    lr: float = 1e-4
    warmup: float = 0.06           # < 1: fraction of the steps; >= 1: a step count
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    layer_decay: float = 1.0       # lr x this per layer below the top (1: one lr for all)
    head_lr_scale: float = 1.0     # the task head's lr as a multiple of lr
    seed: int = 0
    log_every: int = 10
    save_every: int = 500          # checkpoint period in steps (and always at the end)
    eval_every: int = 0            # 0: evaluate at the end only
    keep_checkpoints: int = 2
    resume: bool = False
    progress: bool = True
    precision: str = "auto"        # auto (bf16/fp16 autocast on GPU, fp32 on CPU) | fp32 | bf16 | fp16

    def __post_init__(self):
        object.__setattr__(self, "out", Path(self.out))
        for name in ("batch_size", "grad_accum", "log_every", "save_every", "keep_checkpoints"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name.replace('_', '-')} must be at least 1",
                                 f"got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise InputError("--max-steps must be at least 1", f"got {self.max_steps}")
        if self.max_steps is None and self.epochs <= 0:
            raise InputError("--epochs must be positive", f"got {self.epochs}")
        if not self.lr > 0:
            raise InputError("--lr must be positive", f"got {self.lr}")
        if not 0 < self.layer_decay <= 1:
            raise InputError("--layer-decay must be in (0, 1]", f"got {self.layer_decay}")
        if not self.head_lr_scale > 0:
            raise InputError("--head-lr-scale must be positive", f"got {self.head_lr_scale}")
        if self.warmup < 0:
            raise InputError("--warmup must be >= 0", f"got {self.warmup}")
        if self.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise InputError(f"unknown precision {self.precision!r}", "use auto, fp32, bf16 or fp16")

    def warmup_steps(self, total: int) -> int:
        return int(self.warmup * total) if self.warmup < 1 else int(self.warmup)


@dataclass(frozen=True)
class PretrainConfig:
    corpus: tuple[Path, ...]
    tokenizer: Path
    model: str = "mini"                 # preset name or config.json path
    train: TrainConfig = field(default_factory=lambda: TrainConfig(out=Path("pretrained")))
    seq_len: int = 128
    nsp: bool = False
    whole_word_mask: bool = False
    line_by_line: bool = False          # one sequence per corpus line instead of packed blocks
    mlm_probability: float = 0.15
    init_from: str | None = None        # a checkpoint to continue from (its config wins)
    eval_fraction: float = 0.05         # lines held out for MLM accuracy
    eval_max_sequences: int = 512

    def __post_init__(self):
        object.__setattr__(self, "corpus", tuple(Path(p) for p in self.corpus))
        if not self.corpus:
            raise InputError("no corpus files given", "pass one or more text files")
        if not 0 < self.mlm_probability < 1:
            raise InputError("--mlm-probability must be in (0, 1)", f"got {self.mlm_probability}")
        if self.seq_len < 8:
            raise InputError("--seq-len must be at least 8", f"got {self.seq_len}")
        if self.nsp and self.line_by_line:
            raise InputError("--nsp and --line-by-line do not go together",
                             "NSP pairs segments of a document; drop one of the flags")
        if not 0 <= self.eval_fraction < 1:
            raise InputError("--eval-fraction must be in [0, 1)", f"got {self.eval_fraction}")

    @property
    def task(self) -> str:
        return "pretraining" if self.nsp else "fill-mask"


@dataclass(frozen=True)
class FinetuneConfig:
    model: str
    task: str
    train_file: Path
    eval_file: Path | None = None
    train: TrainConfig = field(default_factory=lambda: TrainConfig(out=Path("finetuned"), lr=3e-5))
    max_seq_len: int = 128
    doc_stride: int = 128               # QA: tokens of overlap between windows (HF's meaning)
    max_query_len: int = 64
    max_answer_len: int = 30

    def __post_init__(self):
        if self.task not in FINETUNE_TASKS:
            raise InputError(f"unknown fine-tuning task {self.task!r}",
                             f"use one of {', '.join(FINETUNE_TASKS)}")
        object.__setattr__(self, "train_file", Path(self.train_file))
        if self.eval_file is not None:
            object.__setattr__(self, "eval_file", Path(self.eval_file))
        if self.max_seq_len < 8:
            raise InputError("--max-seq-len must be at least 8", f"got {self.max_seq_len}")
