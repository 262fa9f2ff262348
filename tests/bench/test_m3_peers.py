"""The peers' benches' bookkeeping, without the references' environment: which exports and
engines a `--quantize none,int8 --engines cpu,auto --streams 1,auto` run loads (references.py)
and how bench.m3_peers judges an engine's BGE-M3 outputs against FlagEmbedding's — on arrays
made here whose errors are known."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bertonnx.bench import references
from bertonnx.bench.m3_peers import _accuracy, _sparse_cosine


def test_every_export_runs_on_every_engine_and_stream_count():
    loads = references.bertonnx_loads("cpu,auto", "1,auto", "none,int8")
    assert loads == {
        "cpu": ("none", {"providers": "cpu", "streams": 1, "bulk": False}),
        "cpu, streams auto": ("none", {"providers": "cpu", "streams": "auto", "bulk": True}),
        "auto": ("none", {"providers": "auto", "streams": 1, "bulk": False}),
        "auto, streams auto": ("none", {"providers": "auto", "streams": "auto", "bulk": True}),
        "int8 cpu": ("int8", {"providers": "cpu", "streams": 1, "bulk": False}),
        "int8 cpu, streams auto": ("int8", {"providers": "cpu", "streams": "auto",
                                            "bulk": True}),
        "int8 auto": ("int8", {"providers": "auto", "streams": 1, "bulk": False}),
        "int8 auto, streams auto": ("int8", {"providers": "auto", "streams": "auto",
                                             "bulk": True}),
    }
    assert references.export_folder(Path("w"), "none") == Path("w/export")
    assert references.export_folder(Path("w"), "int8") == Path("w/export-int8")


def _reference(rng) -> tuple[dict, list[dict]]:
    """FlagEmbedding's arrays for two texts (as flagembedding_arrays keeps them) and the same
    outputs as bertonnx's pipeline answers them."""
    dense = rng.standard_normal((2, 8)).astype(np.float32)
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    got = []
    for i, n in enumerate((3, 5)):
        vecs = rng.standard_normal((n, 4)).astype(np.float32)
        got.append({"dense_vecs": dense[i].copy(), "colbert_vecs": vecs,
                    "lexical_weights": [{"index": 7, "value": 0.5}, {"index": 2, "value": 0.25}]})
    ref = references.flagembedding_arrays({
        "dense_vecs": dense, "colbert_vecs": [g["colbert_vecs"].copy() for g in got],
        "lexical_weights": [{"2": 0.25, "7": 0.5}, {"2": 0.25, "7": 0.5}]})
    return ref, got


def test_the_same_outputs_are_exact():
    ref, got = _reference(np.random.default_rng(0))
    a = _accuracy(got, ref)
    assert (a.same, a.dense, a.sparse, a.colbert) == (2, 0.0, 0.0, 0.0)
    assert a.dense_cosine == pytest.approx(1.0, abs=1e-6)
    assert a.sparse_cosine == pytest.approx(1.0, abs=1e-6)
    assert a.token_cosine.shape == (8,)   # every token of both texts
    np.testing.assert_allclose(a.token_cosine, 1.0, atol=1e-6)


def test_a_moved_id_and_a_turned_token_are_measured_not_dropped():
    ref, got = _reference(np.random.default_rng(1))
    # text 0 gains an id (weight 0.5, beside 0.25 and 0.5): its sparse cosine is
    # (0.25² + 0.5²) / (|(0.25, 0.5, 0.5)| · |(0.25, 0.5)|) = 0.3125 / (0.75 · 0.559...)
    got[0]["lexical_weights"].append({"index": 9, "value": 0.5})
    # text 1's first token turns by 90 degrees: cosine 0 for that token, 1 for the others
    v = got[1]["colbert_vecs"][0].copy()
    got[1]["colbert_vecs"][0] = np.array([-v[1], v[0], -v[3], v[2]], np.float32)
    a = _accuracy(got, ref)
    assert a.same == 1   # text 0's ids differ; text 1 keeps them
    assert a.sparse_cosine == pytest.approx(0.3125 / (0.75 * np.hypot(0.25, 0.5)), rel=1e-6)
    assert a.token_cosine.min() == pytest.approx(0.0, abs=1e-6)
    assert np.sort(a.token_cosine)[1:] == pytest.approx(np.ones(7), abs=1e-6)
    assert a.colbert == pytest.approx(float(np.abs(got[1]["colbert_vecs"][0] - v).max()))


def test_a_text_whose_lexical_weights_vanish_scores_zero_not_nan():
    ref, got = _reference(np.random.default_rng(2))
    got[1]["lexical_weights"] = []   # FlagEmbedding kept two ids for it
    assert _accuracy(got, ref).sparse_cosine == 0.0
    assert _sparse_cosine({}, {}) == 1.0   # both empty: the same answer
