"""scripts/int8_to_checkpoint.py: an int8 fill-mask export dequantizes back to the weights it
was made from, each within one quantization step — so a wrong mapping (a transposed matrix,
q/k/v swapped, a layer off by one) fails, since it is off by the weights' own size."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def test_int8_export_dequantizes_to_its_checkpoint(tiny_checkpoint, tmp_path):
    from bertonnx.build import load_pretrained
    from bertonnx.export import export_model

    from tests.int8_options import ort_int8

    source = tiny_checkpoint("fill-mask")
    # parity off: int8 agreement on a tiny random model is not what this test is about; s8,
    # since a SmoothQuant graph's weights are scaled (the script refuses it: below)
    export_model(source, "fill-mask", tmp_path / "int8",
                 ort_int8(int8_recipe="s8", parity=False))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "int8_to_checkpoint.py"),
                          str(tmp_path / "int8"), str(tmp_path / "recovered")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]

    original = load_pretrained(source, "fill-mask").state_dict()
    recovered = load_pretrained(tmp_path / "recovered", "fill-mask").state_dict()
    assert recovered.keys() == original.keys()
    for name, w in original.items():
        w, r = w.numpy(), recovered[name].numpy()
        # 7-bit per-channel weights (reduce_range) or uint8 per-tensor embeddings: one step is
        # at most the tensor's range / 127; fp32 tensors (biases, LayerNorms) come back exact
        step = (w.max() - w.min()) / 127
        assert np.abs(r - w).max() <= step + 1e-6, name
    assert (tmp_path / "recovered" / "vocab.txt").is_file()


def test_a_smoothquant_graph_is_refused_in_one_line(tiny_checkpoint, tmp_path):
    from bertonnx.export import export_model

    from tests.int8_options import ort_int8

    export_model(tiny_checkpoint("fill-mask"), "fill-mask", tmp_path / "int8",
                 ort_int8(int8_recipe="s8-smooth-qkv", parity=False))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "int8_to_checkpoint.py"),
                          str(tmp_path / "int8"), str(tmp_path / "recovered")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0, out.stderr[-2000:]
    assert "SmoothQuant int8 graph" in out.stderr and not (tmp_path / "recovered").exists()
