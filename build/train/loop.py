"""The optimisation loop shared by pretraining and fine-tuning.

Engines, not home-made parts: torch AdamW, a LambdaLR linear warmup/decay (the schedule of
transformers' get_linear_schedule_with_warmup), clip_grad_norm_, torch.amp autocast on GPUs, and
DistributedDataParallel under torchrun (NCCL on GPUs, gloo on CPU).

What the loop adds is bookkeeping that makes runs reproducible:
- the global micro-batch m holds samples perm(epoch)[m*B*W : (m+1)*B*W] and rank r takes the
  r-th slice of B, so a run's data order depends on (seed, B*W) only;
- each micro-batch's mean loss is weighted by its share of the step's loss terms across all
  ranks and accumulation steps, so the gradient of a global batch is the same however it is split
  (2 processes x B equals 1 process x 2B, and equals B with --grad-accum 2);
- dropout's RNG is reseeded from (seed, step, rank) every step and masking draws come from
  (seed, epoch, sample), so --resume needs only weights, optimizer, scheduler and step to
  continue exactly where an uninterrupted run would be.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from bertonnx.runtime.core.atomic import install
from bertonnx.runtime.core.errors import ArtifactError, InputError

from ..checkpoint import convert_state_dict, read_state_dict, save_pretrained
from .config import TrainConfig

STATE_FILE = "trainer_state.pt"
LOG_FILE = "train_log.jsonl"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class TrainData:
    """What the loop trains on: n samples, how to batch them, how to score them."""
    n: int
    make_batch: Callable[[torch.Tensor, int], dict]           # (sample ids, epoch) -> tensors
    loss: Callable[[object, dict], torch.Tensor]              # (model output, batch) -> mean
    count: Callable[[dict], torch.Tensor]                     # terms that mean averages over
    evaluate: Callable[[nn.Module], dict] | None = None       # rank 0, eval mode
    save_extra: Callable[[Path], None] | None = None          # e.g. write the tokenizer
    inputs: tuple[str, ...] = MODEL_INPUTS                    # batch keys passed to forward


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self):
        if self.world > 1:
            dist.barrier()

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            t = t.clone()
            dist.all_reduce(t)
        return t


def setup_distributed() -> DistEnv:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; a plain run is a world of one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistEnv(rank, world, local, device)


def linear_schedule(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))
    return factor


_LAYER = re.compile(r"^encoder\.layers\.(\d+)\.")


def lr_scale(name: str, layers: int, cfg: TrainConfig) -> float:
    """A parameter's share of --lr: `layer_decay` per layer below the top (embeddings lowest,
    the encoder's top parts such as the pooler at 1), and `head_lr_scale` on the head."""
    if name.startswith("head."):
        return cfg.head_lr_scale
    found = _LAYER.match(name)
    depth = int(found.group(1)) + 1 if found else (0 if name.startswith("encoder.embeddings.")
                                                   else layers + 1)
    return cfg.layer_decay ** (layers + 1 - depth)


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # BERT's recipe: no weight decay on biases and LayerNorm weights.
    layers = getattr(getattr(model, "config", None), "num_hidden_layers", 0)
    groups: dict[tuple[float, bool], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((lr_scale(name, layers, cfg), p.ndim >= 2), []).append(p)
    return torch.optim.AdamW([{"params": ps, "lr": cfg.lr * scale,
                               "weight_decay": cfg.weight_decay if decay else 0.0}
                              for (scale, decay), ps in groups.items()], lr=cfg.lr)


def autocast_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    if cfg.precision == "fp32" or (cfg.precision == "auto" and device.type != "cuda"):
        return None
    if cfg.precision == "fp16":
        return torch.float16
    if cfg.precision == "bf16" or torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def checkpoints(out: Path) -> list[Path]:
    found = [p for p in out.glob("checkpoint-*") if p.is_dir() and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def load_weights(model: nn.Module, folder: Path) -> None:
    ours, _, unknown = convert_state_dict(read_state_dict(folder), model)
    missing = set(model.state_dict()) - set(ours)
    if unknown or missing:
        raise ArtifactError(f"checkpoint {folder} does not match the model being trained",
                            "resume with the same model, task and labels, or drop --resume")
    model.load_state_dict(ours)


class _Silent:
    """The progress of a loop nobody watches (a library call that passed no reporter)."""

    def __init__(self, *args, **kwargs):
        pass

    def set_postfix(self, **fields) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


class Trainer:
    """`progress`: a reporter class taking (total, desc, initial=, enabled=) with set_postfix,
    update and close — the CLI passes runtime/cli/progress.py's (a tqdm bar on a terminal,
    lines in logs); the build package itself shows nothing, as it imports no application."""

    def __init__(self, model: nn.Module, data: TrainData, cfg: TrainConfig, env: DistEnv,
                 progress: type | None = None):
        self.progress = progress or _Silent
        self.model, self.data, self.cfg, self.env = model, data, cfg, env
        self.out = cfg.out
        self.global_micro = cfg.batch_size * env.world
        self.micro_per_epoch = data.n // self.global_micro
        self.steps_per_epoch = self.micro_per_epoch // cfg.grad_accum
        if self.steps_per_epoch == 0:
            raise InputError(
                f"{data.n} training samples are fewer than one global batch "
                f"({cfg.batch_size} x {env.world} processes x {cfg.grad_accum} accumulation)",
                "lower --batch-size or --grad-accum, or add data")
        self.total = cfg.max_steps or max(1, math.ceil(cfg.epochs * self.steps_per_epoch))
        self._perm: tuple[int, torch.Tensor] | None = None

    # -- data -----------------------------------------------------------------------------
    def perm(self, epoch: int) -> torch.Tensor:
        if self._perm is None or self._perm[0] != epoch:
            g = torch.Generator().manual_seed(self.cfg.seed * 10_007 + epoch)
            self._perm = (epoch, torch.randperm(self.data.n, generator=g))
        return self._perm[1]

    def micro_batch(self, m: int) -> dict:
        epoch, pos = divmod(m, self.micro_per_epoch)
        start = pos * self.global_micro + self.env.rank * self.cfg.batch_size
        ids = self.perm(epoch)[start:start + self.cfg.batch_size]
        return {k: v.to(self.env.device) for k, v in self.data.make_batch(ids, epoch).items()}

    # -- checkpoints ----------------------------------------------------------------------
    def save_model(self, folder: Path) -> None:
        save_pretrained(self.model, folder)
        if self.data.save_extra:
            self.data.save_extra(folder)

    def save_checkpoint(self, step: int, opt, sched) -> None:
        final = self.out / f"checkpoint-{step}"
        tmp = self.out / f".checkpoint-{step}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.save_model(tmp)
        torch.save({"step": step, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "seed": self.cfg.seed, "global_batch": self.global_micro * self.cfg.grad_accum},
                   tmp / STATE_FILE)
        install(tmp, final)  # a checkpoint folder either is complete or does not exist
        for old in checkpoints(self.out)[:-self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)

    def restore(self, opt, sched) -> int:
        found = checkpoints(self.out)
        if not found:
            raise InputError(f"--resume: no checkpoint-* folder in {self.out}",
                             "drop --resume to start a new run")
        ckpt = found[-1]
        state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=True)
        if state["global_batch"] != self.global_micro * self.cfg.grad_accum:
            raise InputError(
                f"{ckpt} was trained with a global batch of {state['global_batch']}, this run "
                f"has {self.global_micro * self.cfg.grad_accum}",
                "resume with the same --batch-size x processes x --grad-accum")
        load_weights(self.model, ckpt)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        return int(state["step"])

    # -- logging --------------------------------------------------------------------------
    def log(self, record: dict) -> None:
        if self.env.main:
            with open(self.out / LOG_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    def trim_log(self, step: int) -> None:
        """On resume, drop records of steps past the checkpoint: they will be redone."""
        path = self.out / LOG_FILE
        if self.env.main and path.is_file():
            keep = [line for line in path.read_text(encoding="utf-8").splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= step]
            path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")

    def evaluate(self, step: int) -> dict | None:
        if self.data.evaluate is None:
            return None
        result = None
        if self.env.main:
            self.model.eval()
            with torch.no_grad():
                result = self.data.evaluate(self.model)
            self.model.train()
            self.log({"step": step, "eval": result})
        self.env.barrier()
        return result

    # -- the loop -------------------------------------------------------------------------
    def fit(self) -> dict | None:
        cfg, env = self.cfg, self.env
        if env.main:
            self.out.mkdir(parents=True, exist_ok=True)
        env.barrier()
        self.model.to(env.device)
        opt = make_optimizer(self.model, cfg)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, linear_schedule(cfg.warmup_steps(self.total), self.total))
        start = 0
        if cfg.resume:
            start = self.restore(opt, sched)
            self.trim_log(start)
        elif env.main and (self.out / LOG_FILE).exists():
            (self.out / LOG_FILE).unlink()
        self.model.train()
        net = DDP(self.model) if env.world > 1 else self.model
        amp = autocast_dtype(cfg, env.device)
        scaler = torch.amp.GradScaler(enabled=amp == torch.float16)
        bar = self.progress(self.total, "train", initial=start, enabled=cfg.progress and env.main)
        t0, tokens, result = time.perf_counter(), 0, None
        for step in range(start, self.total):
            torch.manual_seed(cfg.seed * 1_000_003 + step * env.world + env.rank)
            batches = [self.micro_batch(step * cfg.grad_accum + a) for a in range(cfg.grad_accum)]
            counts = [self.data.count(b).to(env.device, torch.float32) for b in batches]
            n_global = env.sum(torch.stack(counts).sum()).clamp(min=1)
            step_loss = torch.zeros((), device=env.device)
            for a, (b, c) in enumerate(zip(batches, counts)):
                sync = a == cfg.grad_accum - 1 or env.world == 1
                with (contextlib.nullcontext() if sync else net.no_sync()):
                    with torch.autocast(env.device.type, dtype=amp or torch.float32,
                                        enabled=amp is not None):
                        out = net(**{k: b[k] for k in self.data.inputs})
                    loss = self.data.loss(out, b) if c > 0 else _zero_loss(out)
                    scaler.scale(loss * (c * env.world / n_global)).backward()
                step_loss += loss.detach().float() * c
                tokens += int(b["attention_mask"].sum()) * env.world
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            scaler.step(opt)
            scaler.update()
            lr = sched.get_last_lr()[0]
            sched.step()
            opt.zero_grad(set_to_none=True)
            done = step + 1
            if done % cfg.log_every == 0 or done == self.total or done == start + 1:
                loss_v = float(env.sum(step_loss) / n_global)
                tok_s = tokens / (time.perf_counter() - t0)
                self.log({"step": done, "loss": loss_v, "lr": lr, "tokens_per_s": round(tok_s, 1),
                          "epoch": round(done / self.steps_per_epoch, 4)})
                bar.set_postfix(loss=f"{loss_v:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:.0f}")
            bar.update(1)
            if cfg.eval_every and done % cfg.eval_every == 0 and done != self.total:
                self.evaluate(done)
            if done % cfg.save_every == 0 or done == self.total:
                if env.main:
                    self.save_checkpoint(done, opt, sched)
                env.barrier()
        bar.close()
        result = self.evaluate(self.total)
        if env.main:
            self.save_model(self.out)
            if result is not None:
                (self.out / "eval_results.json").write_text(json.dumps(result, indent=2) + "\n",
                                                            encoding="utf-8")
        env.barrier()
        return result


def _zero_loss(out) -> torch.Tensor:
    """A batch with nothing to score still joins the graph, so DDP's reducer sees every
    parameter; its weight in the step is zero."""
    outs = out if isinstance(out, tuple) else (out,)
    return sum(o.float().sum() for o in outs) * 0.0
