"""bench.serve_models_memory on two tiny exports: one server of both against one server each,
every model asked once through /predict (by name where both serve)."""
from __future__ import annotations

import json

from bertonnx.bench import serve_models_memory

from tests.conftest import CLS, EMB


def test_one_server_of_two_models_against_two_servers(tiny_export, tmp_path, capsys):
    dirs = [tiny_export(EMB), tiny_export(CLS)]
    out = tmp_path / "memory.json"
    assert serve_models_memory.main([*map(str, dirs), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["separate_mib"]) == set(map(str, dirs))
    # a process's own footprint (Python, onnxruntime, the server) is paid once, not twice
    assert result["one_server_mib"] < result["separate_total_mib"]
    assert "2 servers:" in capsys.readouterr().out
