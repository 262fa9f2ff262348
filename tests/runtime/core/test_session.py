"""runtime/core/session.py: the rewrites a CPU session turns off."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from bertonnx.runtime.core import session as session_mod
from bertonnx.runtime.core.session import CPU_DISABLED_OPTIMIZERS, create_session, disabled_optimizers

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HIDDEN = 8


def residual_norm_graph(path):
    """A post-LN residual as export leaves it: Add(x, bias), Add(residual), LayerNormalization,
    with dynamic batch and sequence (what onnxruntime's SkipLayerNormFusion matches)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", HIDDEN])
    r = helper.make_tensor_value_info("r", TensorProto.FLOAT, ["b", "t", HIDDEN])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", HIDDEN])
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.random(HIDDEN, dtype=np.float32), n)
             for n in ("bias", "gamma", "beta")]
    nodes = [helper.make_node("Add", ["x", "bias"], ["xb"]),
             helper.make_node("Add", ["xb", "r"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-12)]
    graph = helper.make_graph(nodes, "g", [x, r], [y], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)


def ops_after_load(path, out, disabled):
    """The op types onnxruntime runs after its load-time rewrites, `disabled` turned off."""
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(out)
    opts.log_severity_level = 3
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"],
                         disabled_optimizers=disabled)
    return [n.op_type for n in onnx.load(str(out)).graph.node]


def test_the_disabled_rewrite_is_the_one_that_makes_skip_layer_norm(tmp_path):
    """The name is onnxruntime's: without it the pair is fused into SkipLayerNormalization at
    load, with it the Add + LayerNormalization stay (guards a rename upstream)."""
    path = tmp_path / "m.onnx"
    residual_norm_graph(path)
    assert "SkipLayerNormalization" in ops_after_load(path, tmp_path / "a.onnx", [])
    kept = ops_after_load(path, tmp_path / "b.onnx", list(CPU_DISABLED_OPTIMIZERS))
    assert "SkipLayerNormalization" not in kept and "LayerNormalization" in kept


def test_cpu_sessions_turn_it_off_and_gpu_sessions_keep_it(tmp_path, monkeypatch):
    assert disabled_optimizers(["CPUExecutionProvider"]) == list(CPU_DISABLED_OPTIMIZERS)
    assert disabled_optimizers(["CUDAExecutionProvider", "CPUExecutionProvider"]) == []
    path = tmp_path / "m.onnx"
    residual_norm_graph(path)
    seen = []
    real = ort.InferenceSession

    def spy(*args, **kwargs):
        seen.append(kwargs.get("disabled_optimizers"))
        return real(*args, **kwargs)
    monkeypatch.setattr(session_mod.ort, "InferenceSession", spy)
    sess = create_session(path, threads=1)
    assert seen == [list(CPU_DISABLED_OPTIMIZERS)]
    x = np.ones((2, 3, HIDDEN), np.float32)
    y = sess.inner.run(None, {"x": x, "r": x})[0]
    assert y.shape == (2, 3, HIDDEN) and np.isfinite(y).all()
