"""What `bertonnx serve` tells its user (issue 31): the routes it announces are the ones that
serve the export's task, a damaged export's line names its fix once, and the /predict and /v2
refusal of a top_k past the bound is the library's own message."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.live_server import LiveServer


@pytest.mark.parametrize("task, embeddings", [("fill-mask", False),
                                              ("feature-extraction", True)])
def test_serve_announces_only_the_routes_that_serve_its_task(tiny_export, task, embeddings):
    """/v1/embeddings answers an embedding export only; `serve` on a fill-mask export listed
    it among its routes all the same (issue 31)."""
    with LiveServer.serve(tiny_export(task)) as server:
        line = next(x for x in server.lines if "bertonnx: serving" in x)
        name = Path(tiny_export(task)).name
        assert line.rstrip().endswith(
            "— POST /predict, " + ("/v1/embeddings, " if embeddings else "")
            + f"/v2/models/{name}/infer; GET /health, /metrics, /v1/models, /v2"), line
        # and the /predict refusal of a top_k past the bound is the library's message
        if task == "fill-mask":
            message = "top_k must be an integer from 1 to 1000, got 1001 — pass e.g. top_k=5"
            r = httpx.post(server.url + "/predict", timeout=60, json={
                "inputs": "the [MASK] sat", "parameters": {"top_k": 1001}})
            assert r.status_code == 400 and r.json()["error"] == message
            r = httpx.post(f"{server.url}/v2/models/{name}/infer", timeout=60, json={
                "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                            "data": ["the [MASK] sat"]}], "parameters": {"top_k": 1001}})
            assert r.status_code == 400 and r.json()["error"] == message


def test_a_damaged_export_names_its_fix_once(tiny_export, tmp_path):
    """`serve` on an export whose graph is damaged: one line, the fix named once (issue 31:
    the loader's fix, then a second one)."""
    folder = tmp_path / "damaged"
    shutil.copytree(tiny_export("fill-mask"), folder)
    graph = folder / "model.onnx"
    graph.write_bytes(graph.read_bytes()[:100])
    got = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "serve", str(folder),
                          "--port", "0"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 2
    assert got.stderr.splitlines()[-1] == (
        f"bertonnx: error: the server stopped: {graph} is damaged (sha256 differs from the "
        "manifest) — copy it again from the source, or export again"), got.stderr
