"""SmoothQuant before dynamic int8 (export/int8/smooth.py): the smoothed fp32 graph computes
what the fused one does (each scale cancels against its weight row), a weight that several
MatMuls read is scaled once, and the scales really move range from activations to weights.
The real model it is for (all-mpnet-base-v2) is tests/export/test_mpnet_real.py's."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx

from bertonnx.export.graph import save_model
from bertonnx.export.int8 import smooth
from bertonnx.export.int8.recipes import calibration_feeds
from bertonnx.export.parity import session
from bertonnx.runtime.core.contract import FP32_ATOL, MODEL_NAME
from bertonnx.runtime.core.tokenizer import TextTokenizer


def _outputs(path, feeds):
    sess = session(path)
    wanted = {i.name for i in sess.get_inputs()}
    return [sess.run(None, {k: v for k, v in f.items() if k in wanted})[0] for f in feeds]


def test_smoothed_graph_keeps_its_outputs_and_scales_a_shared_weight_once(tiny_export,
                                                                          tmp_path):
    # ALBERT's one layer group runs at both depths: its weights are read by two MatMuls each
    folder = tiny_export("albert:fill-mask")
    feeds = calibration_feeds(TextTokenizer.from_dir(folder))
    proto = onnx.load(str(folder / MODEL_NAME))
    readers = Counter(n.input[1] for n in proto.graph.node if n.op_type == "MatMul")
    assert max(readers.values()) == 2  # the case under test is there
    before = _outputs(folder / MODEL_NAME, feeds)

    smoothed, n, outliers = smooth.smooth(proto, feeds, tmp_path)
    assert outliers == {}  # tiny random weights: no channel near OUTLIER x its median
    assert n == sum(readers.values())  # every MatMul, each with its own Mul
    inverses = {i.name: onnx.numpy_helper.to_array(i) for i in smoothed.graph.initializer
                if i.name.endswith("_smooth_inverse")}
    assert len(inverses) == len(readers)  # one scale per weight, shared by its readers
    # the scales differ across channels: the graph really changed (and could break)
    assert all(np.ptp(np.log(v)) > 0.1 for v in inverses.values()), {
        k: np.ptp(np.log(v)) for k, v in inverses.items()}
    save_model(smoothed, tmp_path / "smoothed.onnx")
    after = _outputs(tmp_path / "smoothed.onnx", feeds)
    # a weight scaled once per reader would be off by its scale, far outside this
    worst = max(np.abs(a - b).max() for a, b in zip(after, before))
    assert worst <= FP32_ATOL, worst


def test_calibration_leaves_the_weights_in_the_graph_and_smooths_it_in_place(tiny_export,
                                                                            tmp_path):
    # the calibration graph is a copy that reads the weights from a file, so the graph keeps
    # its own and is smoothed in place: one set of weights in memory. Saving the graph itself
    # moved them out, and protobuf keeps a parsed message's bytes until the message goes, so
    # the copy read back was a second set (all-mpnet-base-v2's int8 export: 2.9 -> 2.55 GB)
    folder = tiny_export("albert:fill-mask")
    feeds = calibration_feeds(TextTokenizer.from_dir(folder))
    proto = onnx.load(str(folder / MODEL_NAME))
    original = {i.name: bytes(i.raw_data) for i in proto.graph.initializer}
    scaled = {n.input[1] for n in proto.graph.node if n.op_type == "MatMul"}

    smoothed, n, _ = smooth.smooth(proto, feeds, tmp_path)
    assert smoothed is proto and n > 0
    now = {i.name: bytes(i.raw_data) for i in proto.graph.initializer}
    assert all(now[k] == v for k, v in original.items() if k not in scaled)
    assert all(now[k] and now[k] != original[k] for k in scaled)
    assert not any(p.suffix == ".data" for p in tmp_path.rglob("*"))  # the scratch copy is gone


def _chain(a: np.ndarray, b: np.ndarray) -> onnx.ModelProto:
    """x -> MatMul(a) ("first") -> y -> MatMul(b) ("second") -> z."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "a"], ["y"], name="first"),
         onnx.helper.make_node("MatMul", ["y", "b"], ["z"], name="second")], "toy",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [None, 8])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [None, 8])],
        [onnx.numpy_helper.from_array(a, "a"), onnx.numpy_helper.from_array(b, "b")])
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_a_matmul_whose_input_has_an_outlier_channel_is_left_fp32_unsmoothed(tmp_path):
    # x -> MatMul(a) -> y -> MatMul(b): x's channel 0 runs 100x the others (over OUTLIER), y's
    # channels are alike; only b is smoothed, and a is named to stay fp32
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
    proto = _chain(a, b)
    x = rng.uniform(0.5, 1.0, (16, 8)).astype(np.float32)
    x[:, 0] *= 100
    feeds = [{"x": x}]
    assert 100 * 0.5 / 1.0 >= smooth.OUTLIER  # the case under test: channel 0 is an outlier
    smoothed, n, outliers = smooth.smooth(proto, feeds, tmp_path)
    assert (n, list(outliers)) == (1, ["first"]) and outliers["first"] >= smooth.OUTLIER
    muls = [node for node in smoothed.graph.node if node.op_type == "Mul"]
    assert [m.output[0] for m in muls] == [next(node.input[0] for node in smoothed.graph.node
                                                if node.name == "second")]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in smoothed.graph.initializer}
    np.testing.assert_array_equal(inits["a"], a)  # untouched: it stays fp32 as it was
    save_model(smoothed, tmp_path / "toy.onnx")
    np.testing.assert_allclose(_outputs(tmp_path / "toy.onnx", feeds)[0], x @ a @ b,
                               rtol=1e-5, atol=1e-3)


def test_the_widest_input_stays_fp32_when_asked_even_under_the_outlier_bar(tmp_path):
    # the same chain with x's channel 0 at 20x the others (under OUTLIER) and y's alike:
    # widest=1 leaves `first` fp32, unsmoothed; without it both are smoothed
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(2))
    x = rng.uniform(0.5, 1.0, (16, 8)).astype(np.float32)
    x[:, 0] *= 20
    _, n, kept = smooth.smooth(_chain(a, b), [{"x": x}], tmp_path)
    assert (n, kept) == (2, {})
    smoothed, n, kept = smooth.smooth(_chain(a, b), [{"x": x}], tmp_path, widest=1)
    assert (n, list(kept)) == (1, ["first"]) and 10 < kept["first"] < smooth.OUTLIER
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in smoothed.graph.initializer}
    np.testing.assert_array_equal(inits["a"], a)
    save_model(smoothed, tmp_path / "toy.onnx")
    np.testing.assert_allclose(_outputs(tmp_path / "toy.onnx", [{"x": x}])[0], x @ a @ b,
                               rtol=1e-5, atol=1e-3)
