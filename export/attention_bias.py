"""An additive attention bias beside the padding mask (MPNet's relative positions), fused.

onnxruntime's BERT attention fusion (fusion_attention.py) matches the scores' Add only when its
other input is the padding mask itself, Mul(Sub(1, Cast(Unsqueeze(mask))), min). MPNet's
encoder (build/model.py, build/mpnet.py) adds one relative-position bias, computed once, to
that mask, so every layer reads the sum and no layer fuses:

    mask -> Mul ──┐                                    mask -> Mul ────────────> Attention
    relative ─────Add(sum) -> Add(scores) -> Softmax   relative ──(attention_bias)──┘

`detach` points each layer's scores Add at the mask alone and keeps the bias alive as a
temporary graph output; the optimizer then fuses the layers as BERT's; `attach` hands the bias
to every fused Attention as its `attention_bias` input (index 5: (1, nh, T, T), added to the
scaled scores with the mask, as the unfused graph did) and drops the temporary output.
Reference: onnxruntime's contrib op Attention (docs/ContribOperators.md), whose CPU and CUDA
kernels take attention_bias; QAttention has no such input (export/int8/quantize.py keeps an
Attention that reads one in fp32).
"""
from __future__ import annotations

import onnx
from onnx import helper

ATTENTION_BIAS = 5  # Attention's inputs: input, weights, bias, mask_index, past, attention_bias


def _from_padding_mask(node: onnx.NodeProto | None, made: dict, hops: int = 6) -> bool:
    """Is `node` BERT's additive padding mask, Mul(Sub(1, Cast(Unsqueeze(Unsqueeze(
    attention_mask)))), min): a Mul whose first input leads up to the graph input?"""
    if node is None or node.op_type != "Mul":
        return False
    name = node.input[0]
    for _ in range(hops):
        if name == "attention_mask":
            return True
        up = made.get(name)
        if up is None or up.op_type not in ("Sub", "Cast", "Unsqueeze"):
            return False
        name = up.input[-1] if up.op_type == "Sub" else up.input[0]
    return False


def detach(proto: onnx.ModelProto) -> str | None:
    """Rewire every scores Add that reads padding mask + bias to read the mask; the bias's
    name, kept as a graph output until `attach`; None (graph untouched) unless every such Add
    reads the same bias (one computed once, MPNet's)."""
    g = proto.graph
    made = {out: node for node in g.node for out in node.output}
    found = []  # (scores Add, its input index, the sum Add)
    for softmax in (n for n in g.node if n.op_type == "Softmax"):
        scores = made.get(softmax.input[0])
        if scores is None or scores.op_type != "Add":
            continue
        for i, name in enumerate(scores.input):
            total = made.get(name)
            if (total is not None and total.op_type == "Add"
                    and _from_padding_mask(made.get(total.input[0]), made)):
                found.append((scores, i, total))
    if len({total.input[1] for _, _, total in found}) != 1:
        return None  # none, or per-layer biases: not this pattern
    for scores, i, total in found:
        scores.input[i] = total.input[0]
    bias = found[0][2].input[1]
    g.output.append(helper.make_empty_tensor_value_info(bias))
    return bias


def attach(proto: onnx.ModelProto, bias: str) -> int:
    """`bias` as the attention_bias of every Attention; returns how many took it."""
    g = proto.graph
    n = 0
    for node in g.node:
        if node.op_type != "Attention":
            continue
        while len(node.input) < ATTENTION_BIAS:
            node.input.append("")  # no mask_index / past
        node.input.append(bias)
        n += 1
    kept = [o for o in g.output if o.name != bias]
    del g.output[:]
    g.output.extend(kept)
    return n
