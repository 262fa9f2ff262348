"""OpenVINO's own runtime as an onnxruntime session (runtime/core/openvino_runtime.py): what
session.py and export's parity read of it, on any CPU OpenVINO runs on (the engine uses it
where onnxruntime's plugin offers no device; the module itself runs on Intel CPUs too)."""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest

from bertonnx.runtime.core import openvino_engine
from bertonnx.runtime.core.contract import FP32_ATOL

from tests.conftest import CLS, EMB
from tests.runtime._engines import padded_feeds

openvino = pytest.importorskip("openvino", reason="the openvino extra is not installed")
from bertonnx.runtime.core import openvino_runtime  # noqa: E402


def _pair(folder):
    cpu = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    ov = openvino_runtime.compile_model(folder / "model.onnx",
                                        openvino_engine.openvino_config("f32", 1))
    return cpu, ov


@pytest.mark.parametrize("name", [EMB, CLS])
def test_it_shows_the_graph_as_onnxruntime_does(tiny_export, name):
    """Inputs and outputs by name, type and rank, as `InferenceSession` lists them."""
    cpu, ov = _pair(tiny_export(name))
    for theirs, ours in ((cpu.get_inputs(), ov.get_inputs()), (cpu.get_outputs(),
                                                               ov.get_outputs())):
        assert [(a.name, a.type, len(a.shape)) for a in theirs] == \
               [(a.name, a.type, len(a.shape)) for a in ours]
    assert ov.get_providers() == [openvino_runtime.PROVIDER]


def test_its_answers_are_onnxruntime_s_over_padded_shapes(tiny_export):
    cpu, ov = _pair(tiny_export(EMB))
    names = [o.name for o in cpu.get_outputs()]
    for seed, (b, s) in enumerate([(1, 1), (3, 5), (4, 33), (2, 64)]):
        feeds = {k: v for k, v in padded_feeds(b, s, seed).items()
                 if k in {i.name for i in cpu.get_inputs()}}
        keep = feeds["attention_mask"].astype(bool)
        for want, got in zip(cpu.run(names, feeds), ov.run(names, feeds)):
            assert got.shape == want.shape
            if want.ndim >= 2 and want.shape[1] == s:
                want, got = want[keep], got[keep]
            assert np.abs(want - got).max() <= FP32_ATOL, (b, s)
    # one output asked for, by name: that one only
    assert len(ov.run(names[:1], feeds)) == 1


def test_calls_from_many_threads_each_get_their_own_answer(tiny_export):
    """A server's threads call one session at once: each call takes its own infer request,
    so no call reads another's outputs (they differ in shape and values here)."""
    _, ov = _pair(tiny_export(EMB))
    names = [o.name for o in ov.get_outputs()]
    inputs = {i.name for i in ov.get_inputs()}
    work = [{k: v for k, v in padded_feeds(1 + i % 4, 3 + 4 * i, i).items() if k in inputs}
            for i in range(12)]
    alone = [ov.run(names, f) for f in work]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda f: ov.run(names, f), work * 3))
    for i, got in enumerate(together):
        for a, b in zip(alone[i % len(work)], got):
            np.testing.assert_array_equal(a, b)


def test_a_serialized_graph_compiles_as_its_file_does(tiny_export):
    """Export checks graphs it has not written yet (bytes, their weights inside)."""
    import onnx  # the graph's weights read into it: a test-only step

    folder = tiny_export(CLS)
    graph = onnx.load(str(folder / "model.onnx")).SerializeToString()
    ov = openvino_runtime.compile_model(graph, openvino_engine.openvino_config("f32", 1))
    _, from_file = _pair(folder)
    feeds = {k: v for k, v in padded_feeds(2, 9, 0).items()
             if k in {i.name for i in ov.get_inputs()}}
    for a, b in zip(ov.run(None, feeds), from_file.run(None, feeds)):
        np.testing.assert_array_equal(a, b)


FIRST_CALLS = """
import sys, threading
from bertonnx.runtime.core import openvino_engine, openvino_runtime
ov = openvino_runtime.compile_model(sys.argv[1], openvino_engine.openvino_config("f32", 1))
feeds = {i.name: __import__("numpy").ones((1, 4), "int64") for i in ov.get_inputs()}
start = threading.Barrier(2)
def call():
    start.wait()
    ov.run(None, feeds)
threads = [threading.Thread(target=call) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


def test_two_threads_first_calls_at_once_do_not_hang(tiny_export):
    """A bulk job's two streams make the process's first infer calls together: before
    openvino_runtime.core() made the first `Type.to_dtype()` itself, that hung for good in 5 of
    40 fresh processes (OpenVINO's Python binding). 16 fresh processes, each given a minute
    (one takes about a second); with the hang back, all 16 finish with odds of about 12%."""
    folder = tiny_export(EMB)

    def first_calls(_):
        try:
            return subprocess.run([sys.executable, "-c", FIRST_CALLS, str(folder / "model.onnx")],
                                  capture_output=True, text=True, timeout=60).returncode
        except subprocess.TimeoutExpired:
            return "hung"

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(first_calls, range(16))) == [0] * 16
