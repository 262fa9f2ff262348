"""DDP under torchrun: 2 CPU processes (gloo) x batch 4 follow the loss curve of 1 process x
batch 8 — the same global batches, masks and loss normalisation, so with dropout off the curves
agree to float rounding (summation order differs), not merely in shape."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ._corpus import make_corpus, make_tokenizer

CONFIG = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
          "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _curve(out):
    recs = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if "loss" in r]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tmp_path):
    corpus = make_corpus(tmp_path / "c.txt")
    tok = make_tokenizer(tmp_path / "tok", corpus)
    (tmp_path / "cfg.json").write_text(json.dumps(CONFIG), encoding="utf-8")
    args = ["pretrain", str(corpus), "--tokenizer", str(tok), "--config",
            str(tmp_path / "cfg.json"), "--seq-len", "32", "--max-steps", "8", "--lr", "3e-3",
            "--log-every", "1", "--no-progress", "--eval-fraction", "0.05"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", *args, "--batch-size",
                          "8", "--out", str(tmp_path / "one")], env=env, capture_output=True,
                         text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node", "2", "-m", "bertonnx.runtime.cli", *args,
                          "--batch-size", "4", "--out", str(tmp_path / "two")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = _curve(tmp_path / "one"), _curve(tmp_path / "two")
    assert len(a) == len(b) == 8
    assert a[-1] < a[0]
    assert b == pytest.approx(a, rel=1e-4)
    # only rank 0 wrote: one log record per step, one final model
    assert (tmp_path / "two" / "model.safetensors").is_file()
