"""Recover a trainable checkpoint from a bertonnx int8 fill-mask export (weights dequantized).

The fill-mask default's fp32 training checkpoints were not kept (they live in `runs/`, which is
not committed); its int8 export is. Dequantizing that export — (q - zero_point) * scale for
every weight, per output channel for the encoder's matrices, per tensor for the embeddings —
gives weights within one quantization step of the trained ones, whose cloze figures are the
export's, so training can continue from them instead of starting again from MiniLM.

Reads only graphs this project writes: node and initializer names come from
`bertonnx.export` (onnxruntime's fusion keeps torch's module paths in MatMul node names and
numbers the QAttention nodes by layer).

    python scripts/int8_to_checkpoint.py runtime/models/english-mlm runs/english-mlm-int8
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from bertonnx.build import BertConfig
from bertonnx.build.heads import build_model
from bertonnx.export.int8 import smooth


def _dequant(inits: dict, q: str, axis: int | None) -> np.ndarray:
    """(q - zero_point) * scale; scale/zero point per channel along `axis`, or per tensor."""
    base = q.removesuffix("_quantized")
    values = inits[q].astype(np.float32)
    scale, zp = inits[f"{base}_scale"], inits[f"{base}_zero_point"].astype(np.float32)
    if axis is not None and scale.ndim == 1 and scale.size > 1:
        shape = [1] * values.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return (values - zp) * scale


def recover(export_dir: Path) -> tuple[BertConfig, dict[str, torch.Tensor]]:
    graph = onnx.load(str(export_dir / "model.onnx")).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    if any(name.endswith(smooth.INVERSE) for name in inits):
        # SmoothQuant scaled each MatMul's weight rows (export/int8/smooth.py): dequantized, they
        # are not the checkpoint's, and dividing the scales back out loses the one-step bound
        raise SystemExit(f"{export_dir} is a SmoothQuant int8 graph: its weights are scaled, "
                         "not the checkpoint's — recover from an export made with "
                         "--int8-recipe s8 (or s8-rr)")
    config = BertConfig.from_hf(export_dir / "config.json")
    H = config.hidden_size
    state: dict[str, np.ndarray] = {}
    for name in ("word", "position", "token_type"):
        state[f"encoder.embeddings.{name}.weight"] = _dequant(
            inits, f"encoder.embeddings.{name}.weight_quantized", None)
    for name in ("weight", "bias"):
        state[f"encoder.embeddings.norm.{name}"] = _dequant(
            inits, f"encoder.embeddings.norm.{name}_quantized", None)
    for node in graph.node:
        if node.op_type == "QAttention":
            layer = int(re.fullmatch(r"Attention_(\d+)_quant", node.name).group(1))
            qkv = _dequant(inits, node.input[1], axis=1)          # (H, 3H), x @ W
            bias = inits[node.input[2]]
            for j, part in enumerate("qkv"):
                state[f"encoder.layers.{layer}.attn.{part}.weight"] = qkv[:, j * H:(j + 1) * H].T
                state[f"encoder.layers.{layer}.attn.{part}.bias"] = bias[j * H:(j + 1) * H]
        elif node.op_type == "MatMulInteger" and node.name.endswith("/MatMul_quant"):
            # "/encoder/layers.0/ffn/up/MatMul_quant" -> "encoder.layers.0.ffn.up"
            module = node.name.strip("/").removesuffix("/MatMul_quant").replace("/", ".")
            state[f"{module}.weight"] = _dequant(inits, node.input[1], axis=1).T  # (out, in)
    for name, array in inits.items():  # fp32 biases and LayerNorms keep their module names
        if array.dtype == np.float32 and re.fullmatch(r"(encoder|head)\.[\w.]+\.(weight|bias)|head\.mlm\.bias", name):
            state.setdefault(name, array)
    return config, {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    config, state = recover(a.export)
    model = build_model(config, "fill-mask")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"not a bertonnx fill-mask export: missing {missing}, unexpected {unexpected}")
    model.save_pretrained(a.out, tokenizer_from=a.export)
    print(f"{len(state)} tensors -> {a.out}")


if __name__ == "__main__":
    main()
