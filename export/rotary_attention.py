"""ModernBERT's attention as onnxruntime's fused ops: RotaryEmbedding and MultiHeadAttention.

onnxruntime's transformer optimizer has no pattern for ModernBERT: its BERT attention fusion
expects q, k and v straight from their projections (rotary embeddings sit in between), and its
RotaryEmbedding fusion (fusion_rotary_attention.py, written for LLaMA and Phi) keeps one
cos/sin cache per graph, where ModernBERT has two rotary bases. So this pass rewrites, per layer,
what build/modernbert.py's RotaryAttention exports — every node of the layer's
`/encoder/layers.{i}/attn/` scope between its packed qkv projection and its output projection:

    qkv MatMul (+bias) -> Reshape -> Transpose -> Split -> rotate q, k (Slice/Neg/Concat/Mul/Add)
      -> SDPA as MatMul/Mul/Add(mask)/Softmax/MatMul -> Transpose -> Reshape -> out MatMul
    ==>
    qkv MatMul (+bias) -> Split(3) -> q, k, v (B, T, H)
      q, k -> RotaryEmbedding (the layer's base: its cos/sin cache)
      -> MultiHeadAttention: global layers mask keys by attention_mask (key_padding_mask),
         local ones add the window's (B, 1, T, T) mask (attention_bias)
      -> out MatMul

The caches are initializers, max_position_embeddings x head_dim / 2 per base, computed as the
model computes its tables (build/modernbert.py `AttentionInputs`), so a graph serves sequences
up to max_position_embeddings. It runs on the exporter's graph, before onnxruntime's
optimizer (whose own rewrites would rename nodes of the scope), and raises CheckFailed when a
layer's scope is not what RotaryAttention exports: fusion lost is a loud failure.
"""
from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from bertonnx.build import BertConfig
from bertonnx.build.modernbert import AttentionInputs, inverse_frequencies
from bertonnx.runtime.core.errors import CheckFailed

MS = "com.microsoft"


def _scope(i: int) -> str:
    return f"/encoder/layers.{i}/attn/"


def _caches(c: BertConfig, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of position x frequency, (max_position_embeddings, head_dim / 2): the first
    half of the model's (T, head_dim) tables, whose second half repeats it."""
    rope = AttentionInputs.rope(inverse_frequencies(c.head_dim, theta),
                                torch.arange(c.max_position_embeddings).float(), torch.float32)
    half = c.head_dim // 2
    return (rope.cos[0, 0, :, :half].numpy().copy(), rope.sin[0, 0, :, :half].numpy().copy())


def _fail(i: int, what: str) -> CheckFailed:
    return CheckFailed(f"rotary attention fusion: layer {i}'s graph is not what the model exports "
                       f"({what})", "the exporter changed; export with --no-optimize and report it")


def fuse(proto: onnx.ModelProto, c: BertConfig) -> int:
    """Rewrite every layer's attention in place (see the module docstring); returns how many."""
    g = proto.graph
    nodes = list(g.node)
    by_name = {n.name: n for n in nodes}
    producer = {o: n for n in nodes for o in n.output}
    H, nh = c.hidden_size, c.num_attention_heads
    removed: set[int] = set()
    before: dict[int, list[onnx.NodeProto]] = {}  # out projection -> the nodes that feed it
    used: set[str] = set()  # which bases' caches the graph reads
    mask = "rotary_key_padding_mask"
    for i in range(c.num_hidden_layers):
        scope = _scope(i)
        qkv = by_name.get(scope + "qkv/Add") or by_name.get(scope + "qkv/MatMul")
        out = by_name.get(scope + "out/MatMul")
        own = [n for n in nodes if n.name.startswith(scope)
               and not n.name.startswith((scope + "qkv/", scope + "out/"))]
        softmax = [n for n in own if n.op_type == "Softmax"]
        if qkv is None or out is None or len(softmax) != 1:
            raise _fail(i, "no qkv and out projections around one Softmax")
        scores = producer.get(softmax[0].input[0])
        own_outputs = {o for n in own for o in n.output}
        if scores is None or scores.op_type != "Add":
            raise _fail(i, "the Softmax does not read scores + mask")
        bias = [x for x in scores.input if x not in own_outputs]
        if len(bias) != 1 or out.input[0] not in own_outputs:
            raise _fail(i, "the mask or the output projection's input")
        mine = {id(n) for n in own}
        # nothing but the output projection may read what is removed
        for n in nodes:
            if id(n) not in mine and n is not out and any(x in own_outputs for x in n.input):
                raise _fail(i, f"{n.name} reads the attention's inner values")
        removed.update(mine)
        local = i % c.global_attn_every_n_layers != 0
        base = "local" if local else "global"
        used.add(base)
        q, k, v, qr, kr, att = (f"{scope}fused_{x}" for x in ("q", "k", "v", "q_rot", "k_rot",
                                                              "out"))
        before[id(out)] = [
            helper.make_node("Split", [qkv.output[0], "rotary_qkv_split"], [q, k, v],
                             name=f"{scope}fused_split", axis=-1),
            *(helper.make_node("RotaryEmbedding", [x, "rotary_position_offset",
                                                   f"rotary_cos_{base}", f"rotary_sin_{base}"],
                               [y], name=f"{scope}fused_rotary_{x[-1]}", domain=MS,
                               num_heads=nh, interleaved=0)
              for x, y in ((q, qr), (k, kr))),
            # global: the padding alone, as the key mask; local: the window's additive mask,
            # which holds the padding too
            helper.make_node("MultiHeadAttention",
                             [qr, kr, v, "", "", bias[0]] if local else [qr, kr, v, "", mask],
                             [att], name=f"{scope}fused_attention", domain=MS, num_heads=nh),
        ]
        out.input[0] = att
    if not removed:
        return 0
    inits = [numpy_helper.from_array(np.array([H, H, H], dtype=np.int64), "rotary_qkv_split"),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "rotary_position_offset")]
    for base in sorted(used):
        cos, sin = _caches(c, c.local_rope_theta if base == "local" else c.global_rope_theta)
        inits += [numpy_helper.from_array(cos, f"rotary_cos_{base}"),
                  numpy_helper.from_array(sin, f"rotary_sin_{base}")]
    head = ([helper.make_node("Cast", ["attention_mask"], [mask], name="rotary_mask_cast",
                              to=TensorProto.INT32)] if "global" in used else [])
    order = head + [m for n in nodes if id(n) not in removed
                    for m in (*before.get(id(n), ()), n)]
    del g.node[:]
    g.node.extend(_live(order, g))
    g.initializer.extend(inits)
    if not any(o.domain == MS for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS, 1))
    return c.num_hidden_layers


def _live(nodes: list[onnx.NodeProto], g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """`nodes` (in an order that runs) less those whose outputs nothing reads any more: the
    model's cos/sin arithmetic, now in the caches."""
    wanted = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for n in reversed(nodes):  # consumers before producers: one backward sweep finds the dead
        if any(o in wanted for o in n.output):
            keep.append(n)
            wanted.update(x for x in n.input if x)
    return keep[::-1]
