"""runtime/core/session.py: the rewrites a CPU session turns off; streams (calls at once)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import session as session_mod
from bertonnx.runtime.core.contract import FP32_ATOL
from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.session import CPU_DISABLED_OPTIMIZERS, create_session, disabled_optimizers

from tests.conftest import EMB
from tests.runtime._engines import EXACT

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


# -- streams: calls at once, the threads split between them ------------------------------------

@pytest.mark.parametrize("engine", EXACT)
@pytest.mark.parametrize("name, call", [
    (EMB, lambda p, xs: p(xs, return_tensors=True, batch_size=3)),
    ("multi-vector", lambda p, xs: np.concatenate(p(xs, batch_size=3))),
])
def test_streams_answer_as_one_call_at_a_time(tiny_export, engine, name, call):
    """A call's micro-batches on two streams: each answer at its input's place, the same
    numbers as one call at a time (fp32: the threads' split only orders sums differently)."""
    texts = ["the cat sat on the mat " * (1 + i % 5) + str(i) for i in range(23)]
    one = load(tiny_export(name), providers=engine, threads=2)
    two = load(tiny_export(name), providers=engine, threads=2, streams=2)
    assert (one.session.config.streams, two.session.config.streams) == (1, 2)
    seen, run = [], two.session.run
    two.session.run = lambda feeds, outputs=None: (
        seen.append(threading.current_thread().name), run(feeds, outputs))[1]
    np.testing.assert_allclose(call(two, texts), call(one, texts), atol=FP32_ATOL)
    assert len(seen) >= 8 and all(n.startswith("bertonnx-stream") for n in seen)


def test_calls_at_once_never_pass_the_streams(tiny_export):
    """Two threads' calls share one session's streams: at most two model calls run at once,
    and each thread gets its own answers."""
    pipe = load(tiny_export(EMB), threads=2, streams=2)
    lock, running, most, run = threading.Lock(), [0], [0], pipe.session.run

    def counted(feeds, outputs=None):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return run(feeds, outputs)
        finally:
            with lock:
                running[0] -= 1

    pipe.session.run = counted
    texts = [[f"text {t} number {i} " * (1 + i % 4) for i in range(30)] for t in range(3)]
    want = [np.asarray(load(tiny_export(EMB), threads=1)(x, batch_size=2)) for x in texts]
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda x: np.asarray(pipe(x, batch_size=2)), texts))
    assert 1 <= most[0] <= 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=FP32_ATOL)


@pytest.mark.parametrize("streams, message", [
    (0, "streams 0 is not \"auto\" or an integer from 1 to 64"),
    ("two", "streams 'two' is not"), (True, "streams True is not"), (65, "streams 65 is not"),
])
def test_bad_streams_are_one_line(tiny_export, streams, message):
    with pytest.raises(ConfigError) as e:
        load(tiny_export(EMB), streams=streams)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
