"""export/fusion.py's unfuse_residual_norms and unfuse_bias_gelu on their own (whole exports:
test_export.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bertonnx.export.fusion import unfuse_bias_gelu, unfuse_residual_norms
from bertonnx.runtime.core.session import create_session

HIDDEN = 16


def skip_norm_graph(bias: bool) -> onnx.ModelProto:
    """One SkipLayerNormalization as onnxruntime's optimizer writes it (with a bias: as graphs
    fused elsewhere carry it), LayerNorm weights away from 1/0."""
    rng = np.random.default_rng(1)
    names = ["gamma", "beta"] + (["bias"] if bias else [])
    inits = [numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), n)
             for n in names]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "t", HIDDEN])
          for n in ("x", "skip", "y")]
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", *names], ["y"],
                            name="norm0", domain="com.microsoft", epsilon=1e-5)
    graph = helper.make_graph([node], "g", io[:2], io[2:], inits)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("bias", [False, True])
def test_unfused_norm_computes_what_the_fused_one_did(tmp_path, bias):
    fused = skip_norm_graph(bias)
    plain = skip_norm_graph(bias)
    assert unfuse_residual_norms(plain) == 1
    ops = [n.op_type for n in plain.graph.node]
    assert ops == ["Add"] * (1 + bias) + ["LayerNormalization"]
    onnx.checker.check_model(plain)
    rng = np.random.default_rng(2)
    feeds = {n: rng.standard_normal((3, 5, HIDDEN)).astype(np.float32) for n in ("x", "skip")}
    outs = []
    for name, proto in (("fused", fused), ("plain", plain)):
        path = tmp_path / f"{name}.onnx"
        onnx.save(proto, path)
        outs.append(create_session(path, threads=1).inner.run(None, feeds)[0])
    # the same sums and the same normalisation: float32 rounding apart
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-5, rtol=0)
    assert np.abs(outs[0]).max() > 0.1


def bias_gelu_graph() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    bias = numpy_helper.from_array(rng.standard_normal(HIDDEN).astype(np.float32), "bias")
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "t", HIDDEN])
          for n in ("x", "y")]
    node = helper.make_node("BiasGelu", ["x", "bias"], ["y"], name="gelu0",
                            domain="com.microsoft")
    graph = helper.make_graph([node], "g", io[:1], io[1:], [bias])
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_unfused_bias_gelu_computes_what_the_fused_one_did(tmp_path):
    fused, plain = bias_gelu_graph(), bias_gelu_graph()
    assert unfuse_bias_gelu(plain) == 1
    assert [(n.op_type, n.domain) for n in plain.graph.node] == [
        ("Add", ""), ("Gelu", "com.microsoft")]
    onnx.checker.check_model(plain)
    x = np.random.default_rng(4).standard_normal((2, 7, HIDDEN)).astype(np.float32) * 3
    outs = []
    for name, proto in (("fused", fused), ("plain", plain)):
        onnx.save(proto, tmp_path / f"{name}.onnx")
        outs.append(create_session(tmp_path / f"{name}.onnx", threads=1).inner.run(
            None, {"x": x})[0])
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-6, rtol=0)
    assert np.abs(outs[0]).max() > 1
