"""`python -m bertonnx.bench.retrieval` at a toy size: tiny random models, bertonnx fp32 and
whichever peers are installed among the cheap ones (sentence-transformers torch), two rounds.
No timing assertions: that every engine answers, that bertonnx's answers equal the
reference's (so the accuracy columns measure precision, not a wiring mistake), and the
arithmetic of the accuracy columns."""
from __future__ import annotations

import importlib.util
import shutil

import numpy as np
import pytest

from bertonnx.bench import timing
from bertonnx.bench.retrieval import (PEERS, RetrievalOptions, chosen_peers, cosines,
                                      ndcg_at_k, retrieval)
from bertonnx.bench.retrieval_memory import child, format_peak_memory
from bertonnx.bench.retrieval_report import format_retrieval
from bertonnx.runtime.core.errors import InputError

HAS_ST = importlib.util.find_spec("sentence_transformers") is not None
MODELS = {"embed": "feature-extraction", "rerank": "text-ranking", "sparse": "sparse-embedding"}


def test_ndcg_is_one_for_the_reference_order_and_graded_below():
    ref = np.array([0.9, 0.1, 0.5, 0.3])
    assert ndcg_at_k(ref, ref) == 1.0
    assert ndcg_at_k(ref * 2 + 1, ref) == 1.0           # a monotone rescaling: same ranking
    swapped = np.array([0.5, 0.1, 0.9, 0.3])            # first and second place swapped
    disc = 1 / np.log2(np.arange(2, 6))
    for k, gains in ((4, np.array([4, 3, 2, 1])), (10, np.array([10, 9, 8, 7]))):
        assert ndcg_at_k(swapped, ref, k) == pytest.approx((gains[[1, 0, 2, 3]] * disc).sum()
                                                           / (gains * disc).sum())
    assert ndcg_at_k(swapped, ref, k=1) == 0.0          # the reference's first not ranked first


def test_cosines_row_wise_with_empty_rows():
    a = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.0, 4.0]])
    b = np.array([[2.0, 0.0], [0.0, 0.0], [1.0, 0.0], [4.0, 3.0]])
    assert cosines(a, b).tolist() == pytest.approx([1.0, 1.0, 0.0, 24 / 25])


def test_rotated_round_robin_starts_each_round_at_the_next_engine():
    order, rounds = [], []
    fns = {n: (lambda n=n: order.append(n)) for n in "abc"}
    timing.round_robin(fns, repeats=4, warmup=0, settle=0, rotate=True,
                       before_round=rounds.append)
    assert "".join(order) == "abc" "bca" "cab" "abc"
    assert rounds == [0, 1, 2, 3]


def test_unknown_peer_is_one_clear_error():
    with pytest.raises(InputError, match="unknown task or peer: onnx"):
        RetrievalOptions(peers=("onnx",))


def test_peers_flag_names_all_none_or_a_list():
    # 'none' was read as a peer named "none" (an empty tuple is falsy)
    assert chosen_peers("none") == ()
    assert chosen_peers("all") == tuple(p for p in PEERS if p != "st-openvino-f32")
    assert chosen_peers("st-openvino-f32") == ("st-openvino-f32",)
    RetrievalOptions(peers=chosen_peers("st-openvino,st-openvino-f32"))  # both are known
    assert chosen_peers(" st-torch, ctranslate2 ,") == ("st-torch", "ctranslate2")

def test_retrieval_runs_every_task_and_agrees_with_its_reference(tmp_path, tiny_checkpoint,
                                                                 tiny_export):
    work = tmp_path / "work"
    for kind, name in MODELS.items():  # the session's exports: reused, as a rerun reuses its own
        shutil.copytree(tiny_export(name), work / f"bertonnx-{kind}-fp32")
    options = RetrievalOptions(work=work, texts=3, passages=2, queries=2, documents=3, rounds=2,
                               threads=1, precisions=("none",),
                               peers=("st-torch",) if HAS_ST else (),
                               **{f"{k}_model": tiny_checkpoint(n) for k, n in MODELS.items()})
    result = retrieval(options)
    assert [t["task"] for t in result["tasks"]] == list(MODELS)
    for t in result["tasks"]:
        rows = {r["engine"]: r for r in t["rows"]}
        assert set(rows) == {"bertonnx fp32"} | ({"sentence-transformers torch"} if HAS_ST else set())
        assert t["reference"] == ("sentence-transformers torch" if HAS_ST else "bertonnx fp32")
        assert len(t["loads"]) == 2 and all(len(r["seconds"]) == 2 for r in rows.values())
        acc = rows["bertonnx fp32"]["accuracy"]
        assert acc["metric"] == ("NDCG@10" if t["task"] == "rerank" else "cosine")
        assert acc["worst"] > 0.9999, (t["task"], acc)  # fp32 parity with the reference
        assert t["count"] == {"embed": 3, "sparse": 2, "rerank": 6}[t["task"]]
    text = format_retrieval(result)
    assert text.count("| engine | precision |") == 3 and "load average before each round" in text


def test_peak_memory_child_reports_its_one_engine(tmp_path, tiny_checkpoint, tiny_export):
    """retrieval_memory's child (what each fresh process runs): one engine built, one call,
    its process's peak RSS before and after the call."""
    work = tmp_path / "work"
    shutil.copytree(tiny_export(MODELS["sparse"]), work / "bertonnx-sparse-fp32")
    options = RetrievalOptions(work=work, passages=2, threads=1,
                               sparse_model=tiny_checkpoint(MODELS["sparse"]))
    row = child("sparse", "bertonnx-fp32", options)
    assert row["engine"] == "bertonnx fp32"
    assert 0 < row["before_mib"] <= row["peak_mib"]
    assert "| bertonnx fp32 |" in format_peak_memory([row])
