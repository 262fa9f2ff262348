"""SmoothQuant for dynamic int8: move each MatMul input's outlier channels into its weights.

Dynamic int8 quantizes a MatMul's input with one scale per tensor, so a few channels far
larger than the rest leave the others a handful of levels. Per input channel j, SmoothQuant
(Xiao et al. 2023, arXiv:2211.10438) divides the activation by s_j and multiplies the weight's
row j by it — the same product in exact arithmetic — with

    s_j = max|x_j| ** ALPHA / max|W_j,:| ** (1 - ALPHA)        x -> MatMul(W)
                                                        ==>   x -> Mul(1/s) -> MatMul(s * W)

The maxima come from running the fused fp32 graph on the calibration sentences (recipes.py
`calibration_feeds`), each raised to the median channel's: after a GELU most channels are
quiet on 40 sentences and fire on others (up to 100x their calibration maximum), and
dividing such a channel by its tiny calibrated scale would blow it up on other text. The Mul
is one elementwise pass over the input, against the MatMul's N multiply-adds per element. A
weight that several MatMuls share (ALBERT's unrolled layers) is scaled once, by the maxima
over all of their inputs.

Measured on the real all-mpnet-base-v2 (FFN inputs of its middle layers carry channels 35-65x
their median; MiniLM-L6's reach 22x): mean cosine of mean-pooled embeddings to fp32 on the
calibration sentences / 19 cloze sentences (scripts/data/cloze_en.tsv) / the 12 QA contexts
of export/texts.py: s8 0.904 / 0.906 / 0.908; smoothed without the median floor (ALPHA 0.75)
0.996 / 0.984 / 0.989; with it, ALPHA 0.5 0.862 / 0.868 / 0.860, 0.7 0.995 / 0.996 / 0.995,
0.75 0.997 / 0.997 / 0.996, 0.8 0.997 / 0.996 / 0.997; s8 with every FFN-down MatMul left fp32
instead 0.991 / 0.993 / 0.991.
"""
from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from bertonnx.runtime.core.session import create_session

from ..attention_bias import ATTENTION_BIAS
from ..graph import without_weights

ALPHA = 0.75  # between the two best of the sweep above
# A MatMul whose input has a channel this many times its median channel on the calibration
# sentences is left fp32, unsmoothed: smoothing would hand its weight row a range OUTLIER**ALPHA
# times the others' (at 64x, 22x: the column's other rows keep a few of 127 levels), and one
# scale per tensor cannot hold it unsmoothed either. all-mpnet-base-v2: 2 of its 72 MatMuls
# (layers 6 and 7 FFN down, 64x and 67x; the next is 48x), its sentences' worst cosine to
# fp32 0.9877 -> 0.9919 at 0.92x the speed; MiniLM-L6's inputs reach 22x (docs/int8.md).
OUTLIER = 50.0
# the name suffix of each smoothed MatMul's 1/s initializer (how a reader tells a smoothed graph)
INVERSE = "_smooth_inverse"
_FLOOR = 1e-5  # a channel that is always 0 (or a zero weight row) keeps s finite


def _shared_matmuls(proto: onnx.ModelProto, attention: bool = False
                    ) -> dict[str, list[onnx.NodeProto]]:
    """Weight name -> the MatMuls (and, with `attention`, the fused Attention nodes) that read
    it as their 2-D constant B, for weights nothing else reads (a tied table read by a Gather
    too is left alone). An Attention that reads an attention_bias stays fp32 (quantize.py):
    smoothing it would add a Mul for nothing."""
    g = proto.graph
    weights = {i.name for i in g.initializer if len(i.dims) == 2}
    ops = ("MatMul", "Attention") if attention else ("MatMul",)
    readers: dict[str, list] = defaultdict(list)
    for node in g.node:
        for name in node.input:
            if name in weights:
                readers[name].append(node)
    return {w: nodes for w, nodes in readers.items()
            if all(n.op_type in ops and n.input[1] == w and n.input[0] != w
                   and not (n.op_type == "Attention" and len(n.input) > ATTENTION_BIAS
                            and n.input[ATTENTION_BIAS])
                   for n in nodes)}


def _channel_maxima(proto: onnx.ModelProto, names: list[str], feeds: list[dict],
                    scratch: Path | None) -> dict[str, np.ndarray]:
    """max |x_j| over every calibration token, per input `names`. The calibration graph is a
    copy that reads `proto`'s weights from a file (`proto` is left as it was): onnx's own
    save would move them out of `proto`, but protobuf keeps a parsed message's bytes until
    the whole message goes, so a reloaded copy held a second set (all-mpnet-base-v2's int8
    export peaked at 2.9 GB with it)."""
    with tempfile.TemporaryDirectory(prefix="bertonnx-smooth-", dir=scratch) as d:
        path = Path(d) / "calibrate.onnx"
        light = without_weights(proto, path.with_name(path.name + ".data"))
        light.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
        onnx.save_model(light, str(path))
        del light
        sess = create_session(path, memory_arena=False).inner
        wanted = {i.name for i in sess.get_inputs()}
        maxima: dict[str, np.ndarray] = {}
        for feed in feeds:
            outs = sess.run(names, {k: v for k, v in feed.items() if k in wanted})
            for name, x in zip(names, outs):
                m = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0)
                maxima[name] = m if name not in maxima else np.maximum(maxima[name], m)
        del sess
    return maxima


def smooth(proto: onnx.ModelProto, feeds: list[dict], scratch: Path | None = None, *,
           alpha: float = ALPHA, attention: bool = False, widest: int = 0
           ) -> tuple[onnx.ModelProto, int, dict[str, float]]:
    """The graph with every eligible MatMul smoothed (see the module docstring), how many
    MatMuls were, and those to leave fp32 instead, unsmoothed, each with its input's widest
    channel over the median one: every MatMul at OUTLIER or more, and, where that is fewer
    than `widest`, the next widest (recipes.py says why). With `attention`, the fused
    Attention's QKV projection is smoothed too (its [H, 3H] weight is a MatMul's B). `proto`
    is changed in place and returned."""
    groups = _shared_matmuls(proto, attention)
    inputs = sorted({n.input[0] for nodes in groups.values() for n in nodes})
    if not inputs:
        return proto, 0, {}
    maxima = _channel_maxima(proto, inputs, feeds, scratch)
    amaxes = {w: np.maximum.reduce([maxima[n.input[0]] for n in nodes])
              for w, nodes in groups.items()}
    ratios = {w: float(a.max() / max(float(np.median(a)), _FLOOR)) for w, a in amaxes.items()
              if all(n.op_type == "MatMul" for n in groups[w])}
    ranked = sorted(ratios, key=ratios.get, reverse=True)
    fp32 = [w for w in ranked if ratios[w] >= OUTLIER]
    fp32 += ranked[len(fp32):widest]
    g = proto.graph
    inits = {i.name: i for i in g.initializer}
    muls: dict[str, onnx.NodeProto] = {}  # the smoothed input -> its Mul, placed before its MatMul
    for w, nodes in groups.items():
        if w in fp32:
            continue
        weight = numpy_helper.to_array(inits[w])  # (K, N)
        amax = np.maximum(amaxes[w], np.median(amaxes[w]))  # quiet channels: module docstring
        s = (np.maximum(amax, _FLOOR) ** alpha
             / np.maximum(np.abs(weight).max(axis=1), _FLOOR) ** (1 - alpha)).astype(np.float32)
        inits[w].CopyFrom(numpy_helper.from_array(weight * s[:, None], w))
        inverse = f"{w}{INVERSE}"
        g.initializer.append(numpy_helper.from_array((1 / s).astype(np.float32), inverse))
        for i, node in enumerate(nodes):
            smoothed = f"{w}_smoothed_{i}"
            muls[smoothed] = helper.make_node("Mul", [node.input[0], inverse], [smoothed],
                                              name=f"{w}_smooth_{i}")
            node.input[0] = smoothed
    ordered = []
    for node in g.node:
        if node.op_type in ("MatMul", "Attention") and node.input[0] in muls:
            ordered.append(muls[node.input[0]])
        ordered.append(node)
    del g.node[:]
    g.node.extend(ordered)
    return proto, len(muls), {n.name: ratios[w] for w in fp32 for n in groups[w]}
