"""The tied MLM decoder through int8: the word embedding stored once, as uint8.

A fill-mask graph reads the (V, H) word embedding W twice: EmbedLayerNormalization looks rows
up, and the decoder is Gemm(h, W, b, transB=1). Left visible, onnxruntime's quantizer
mishandles the shared W: up to 1.2x it rewrites Gemm(transB=1) as MatMul by transposing B *in
place* ("assume B is not used by any other node"), so the embeddings silently read a (H, V)
table; 1.32 quantizes a transposed int8 copy for the Gemm, storing the largest weight twice.

`hide` takes the decoder out of the quantizer's hands before it runs (a MatMul on a Transpose
node, excluded by name); `retie` then points it at the uint8 table QEmbedLayerNormalization
holds:

    h ──DynamicQuantizeLinear──> h_q, s_h, z_h
    W_q (V, H) uint8 ──Transpose──> (H, V)        (folded once at session load)
    MatMulInteger(h_q, W_qᵀ, z_h, z_W) ─Cast─ × (s_h · s_W) ─ + bias ──> logits

QEmbedLayerNormalization quantizes its tables per tensor to uint8, so the decoder is per tensor
uint8 whatever `Int8Settings` says; the settings govern every other weight.
"""
from __future__ import annotations

import onnx
from onnx import helper

from bertonnx.runtime.core.errors import CheckFailed

# The hidden decoder's nodes, which the quantizer must not touch (nodes_to_exclude).
NODES = ("tied_decoder_Transpose", "tied_decoder_MatMul")


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def find(proto: onnx.ModelProto) -> int | None:
    """Index of the decoder Gemm(h, W, b, transB=1) on EmbedLayerNormalization's word table W,
    or None when the graph has no tied decoder."""
    g = proto.graph
    embed_w = {n.input[2] for n in g.node if n.op_type == "EmbedLayerNormalization"}
    for i, n in enumerate(g.node):
        if (n.op_type == "Gemm" and n.input[1] in embed_w and _attr(n, "transB", 0) == 1
                and _attr(n, "transA", 0) == 0 and _attr(n, "alpha", 1.0) == 1.0
                and _attr(n, "beta", 1.0) == 1.0):
            return i
    return None


def hide(proto: onnx.ModelProto) -> str | None:
    """Gemm(h, W, b, transB=1) on the embedding W -> MatMul(h, Transpose(W)) + b, the nodes
    named so the quantizer can be told to leave them alone (NODES). Returns W, or None when the
    graph has no tied decoder."""
    g = proto.graph
    i = find(proto)
    if i is None:
        return None
    n = g.node[i]
    w, out = n.input[1], n.output[0]
    new = [helper.make_node("Transpose", [w], [w + "_tied_T"], perm=[1, 0],
                            name="tied_decoder_Transpose"),
           helper.make_node("MatMul", [n.input[0], w + "_tied_T"],
                            [out + ("_mm" if len(n.input) > 2 else "")],
                            name="tied_decoder_MatMul")]
    if len(n.input) > 2:
        new.append(helper.make_node("Add", [out + "_mm", n.input[2]], [out],
                                    name="tied_decoder_Add"))
    del g.node[i]
    for j, m in enumerate(new):
        g.node.insert(i + j, m)
    return w


def unhide(proto: onnx.ModelProto) -> None:
    """Undo `hide` where the embeddings stayed fp32: the decoder is Gemm(h, W, b, transB=1) on
    the one fp32 W again (a Transpose would be folded into a second copy at session load)."""
    g = proto.graph
    idx = {n.name: i for i, n in enumerate(g.node)}
    t, mm = g.node[idx["tied_decoder_Transpose"]], g.node[idx["tied_decoder_MatMul"]]
    add = g.node[idx["tied_decoder_Add"]] if "tied_decoder_Add" in idx else None
    out = add.output[0] if add is not None else mm.output[0]
    inputs = [mm.input[0], t.input[0]] + ([add.input[1]] if add is not None else [])
    gemm = helper.make_node("Gemm", inputs, [out], transB=1, name="tied_decoder_Gemm")
    drop = {"tied_decoder_Transpose", "tied_decoder_MatMul", "tied_decoder_Add"}
    at = min(idx[n] for n in drop if n in idx)
    keep = [n for n in g.node if n.name not in drop]
    del g.node[:]
    g.node.extend(keep[:at] + [gemm] + keep[at:])


def retie(proto: onnx.ModelProto, w: str) -> None:
    """Point the hidden decoder at QEmbedLayerNormalization's uint8 W; drop the fp32 W."""
    g = proto.graph
    qemb = [n for n in g.node if n.op_type == "QEmbedLayerNormalization"]
    if len(qemb) != 1:
        raise CheckFailed("int8: the embeddings were not quantized (no QEmbedLayerNormalization)",
                          "export without --quantize int8 and report it")
    wq, ws, wz = qemb[0].input[2], qemb[0].input[8], qemb[0].input[13]
    idx = {n.name: i for i, n in enumerate(g.node)}
    mm = g.node[idx["tied_decoder_MatMul"]]
    h, out = mm.input[0], mm.output[0]
    new = [
        helper.make_node("Transpose", [wq], [wq + "_T"], perm=[1, 0], name="tied_decoder_TransposeQ"),
        helper.make_node("DynamicQuantizeLinear", [h], [h + "_q", h + "_s", h + "_z"],
                         name="tied_decoder_QuantizeInput"),
        helper.make_node("MatMulInteger", [h + "_q", wq + "_T", h + "_z", wz], [out + "_i32"],
                         name="tied_decoder_MatMulInteger"),
        helper.make_node("Cast", [out + "_i32"], [out + "_f32"], to=onnx.TensorProto.FLOAT,
                         name="tied_decoder_Cast"),
        helper.make_node("Mul", [h + "_s", ws], [out + "_scale"], name="tied_decoder_Scale"),
        helper.make_node("Mul", [out + "_f32", out + "_scale"], [out], name="tied_decoder_Rescale"),
    ]
    at = min(idx["tied_decoder_Transpose"], idx["tied_decoder_MatMul"])
    keep = [n for n in g.node if n.name not in ("tied_decoder_Transpose", "tied_decoder_MatMul")]
    del g.node[:]
    g.node.extend(keep[:at] + new + keep[at:])
    used = {i for n in g.node for i in n.input}
    for init in list(g.initializer):
        if init.name == w and w not in used:
            g.initializer.remove(init)
