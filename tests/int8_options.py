"""Export options for the tests of onnxruntime's int8 graph (model.onnx) alone.

Where nncf is installed, as in the suite's environment, an int8 export also writes NNCF's
static int8 graph for OpenVINO and judges it (export/openvino_int8.py): a child process that
imports nncf and calibrates on 338 texts, 3-4 s for a tiny model and 41 s for
all-mpnet-base-v2 on a 2-core AMD EPYC. The tests of the dynamic recipes, their accuracy and
their records leave it out; tests/export/test_openvino_int8.py exports it as users get it, and
so do test_quantize.py (the fill-mask and QA heads) and test_family_export.py (RoBERTa)."""
from __future__ import annotations

import math

from bertonnx.export import ExportOptions


def ort_int8(**options) -> ExportOptions:
    """`ExportOptions(quantize="int8", **options)` without the OpenVINO graph."""
    return ExportOptions(quantize="int8", openvino_int8=False, **options)


def check_openvino_graph(folder, manifest) -> None:
    """An int8 export made as users get it wrote NNCF's graph beside model.onnx and judged it
    (where nncf and openvino are installed)."""
    from bertonnx.export import openvino_int8  # lazy, as onnx below

    if openvino_int8.missing() is None:
        record = manifest.engines[openvino_int8.KEY]
        assert (folder / record["file"]).is_file() and "agreement" in record, record


def fp32_matmul_extra_bytes(path) -> int:
    """What the MatMuls an int8 graph left fp32 (their recipe's widest or outlier inputs) add
    to its size: 3 bytes a weight, 4 against int8's 1."""
    import onnx  # lazy: the options above are read by tests that need no graph

    g = onnx.load(str(path), load_external_data=False).graph
    dims = {i.name: i.dims for i in g.initializer}
    return sum(3 * math.prod(dims[n.input[1]]) for n in g.node if n.op_type == "MatMul")
