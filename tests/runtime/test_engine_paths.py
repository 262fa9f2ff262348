"""The OpenVINO engine through every way an export is run (issue 41 item 1): `bertonnx serve`
(its routes, batching and limits unchanged), `bertonnx run`, Ray Data's `Predictor` and a
`run --ray` job's actors, each answering as the CPU provider does within the fp32 tolerance
(OpenVINO f32; bf16's gate is tests/runtime/core/test_engines.py's)."""
from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.contract import FP32_ATOL

from tests.conftest import CLS, EMB
from tests.live_server import LiveServer
from tests.runtime.bulk._helpers import bulk, read_output, write_input
from tests.runtime._engines import NO_OPENVINO, OPENVINO

pytestmark = pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
TEXTS = ["the cat sat on the mat", "a dog", "paris is a city in france " * 6, "london music"]


def test_serve_on_openvino_answers_as_the_cpu_provider(tiny_export):
    folder = tiny_export(EMB)
    want = np.asarray(load(folder, providers="cpu")(TEXTS, normalize=True))
    with LiveServer.serve(folder, "--providers", "openvino:f32") as server:
        openai = httpx.post(f"{server.url}/v1/embeddings", json={"input": TEXTS, "model": "feature-extraction"},
                            timeout=60)
        assert openai.status_code == 200, openai.text
        got = np.asarray([d["embedding"] for d in openai.json()["data"]])
        assert np.abs(got - want).max() <= FP32_ATOL
        tei = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS}, timeout=60)
        assert np.abs(np.asarray(tei.json()) - want).max() <= FP32_ATOL
        # a request past the inputs limit is refused as on the CPU provider
        big = httpx.post(f"{server.url}/embed", json={"inputs": ["x"] * 10_000}, timeout=60)
        assert big.status_code in (413, 422), big.text
        assert server.metric('bertonnx_engine_info{engine="openvino",precision="f32"}') == 1


def test_bulk_run_on_openvino_answers_as_the_cpu_provider(capsys, tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": t} for t in TEXTS * 5])
    outs = {}
    for engine in ("cpu", "openvino:f32"):
        out = tmp_path / f"{engine.replace(':', '-')}.jsonl"
        rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", out,
                          "--top-k", "all", "--no-progress", "--providers", engine)
        assert rc == 0, err
        outs[engine] = read_output(out)
    for a, b in zip(outs["cpu"], outs["openvino:f32"]):
        assert [x["label"] for x in a["result"]] == [x["label"] for x in b["result"]]
        assert max(abs(x["score"] - y["score"]) for x, y in zip(a["result"], b["result"])) \
            <= FP32_ATOL


def test_ray_data_predictor_on_openvino(tiny_export):
    pa = pytest.importorskip("pyarrow")
    from bertonnx.runtime.bulk.ray import Predictor

    p = Predictor(tiny_export(EMB), {"normalize": True}, providers="openvino:f32")
    assert p.runner.pipeline.session.config.key == "openvino:f32"
    got = np.asarray(p(pa.table({"text": TEXTS}))["result"].to_pylist())
    want = np.asarray(load(tiny_export(EMB), providers="cpu")(TEXTS, normalize=True))
    assert np.abs(got - want).max() <= FP32_ATOL
