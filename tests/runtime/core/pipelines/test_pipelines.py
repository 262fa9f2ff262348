"""Runtime behaviour beyond parity: batching order, torch-free imports, long inputs, errors."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from bertonnx.runtime import ArtifactError, ConfigError, InputError, TaskMismatchError, load
from bertonnx.runtime.core.batches import micro_batches
from bertonnx.runtime.core.session import create_session

from tests.conftest import CLS, EMB, NER, QA, TASK_NAMES

from tests.runtime._compare import assert_same

# mixed lengths so length-sorting really reorders
MIXED = ["paris", "the cat sat on the mat and the dog ran to the river in paris",
         "a dog", "she said it was a good film and he said it was a bad film !", "the cat"]


# ---------------------------------------------------------------- batching

@pytest.mark.parametrize("name, call", [
    ("fill-mask", lambda p, xs: p([x + " [MASK]" for x in xs], top_k=3, batch_size=2)),
    ("text-classification", lambda p, xs: p(xs, top_k=None, batch_size=2)),
    ("token-classification", lambda p, xs: p(xs, aggregation_strategy="simple", batch_size=2)),
    ("feature-extraction", lambda p, xs: p(xs, batch_size=2)),
])
def test_batched_equals_one_by_one(ours, name, call):
    pipe = ours(name)
    batched = call(pipe, MIXED)
    one_by_one = [call(pipe, [x])[0] for x in MIXED]
    assert_same(batched, one_by_one)


def _plain(x):
    """Arrays as nested lists of floats, so assert_same compares every value."""
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return float(x) if isinstance(x, np.floating) else x


QUESTIONS = [{"question": "where did the dog run ?", "context": c} for c in MIXED]


@pytest.mark.parametrize("name, call", [
    ("fill-mask", lambda p, xs: p([x + " [MASK]" for x in xs], top_k=3, batch_size=2)),
    ("text-classification", lambda p, xs: p(xs, top_k=None, batch_size=2)),
    ("token-classification", lambda p, xs: p(xs, aggregation_strategy="none", batch_size=2)),
    ("question-answering", lambda p, xs: p(QUESTIONS, top_k=3, batch_size=2)),
    ("feature-extraction", lambda p, xs: p(xs, pooling="none", batch_size=2)),
    ("feature-extraction", lambda p, xs: p(xs, pooling="mean", normalize=False, batch_size=5)),
    ("sparse-embedding", lambda p, xs: p(xs, batch_size=2)),
    ("text-ranking", lambda p, xs: p({"query": "a dog in paris", "documents": xs})),
    ("zero-shot-classification", lambda p, xs: p(xs, candidate_labels=["cat", "city"])),
    # (ColBERT queries: one width, their cut, on every engine — test_multi_vector.py)
    ("multi-vector", lambda p, xs: p(xs, batch_size=2)),
    ("bge-m3", lambda p, xs: p(xs, batch_size=2)),
    ("modernbert:feature-extraction", lambda p, xs: p(xs, pooling="none", batch_size=2)),
    ("deberta-v2:question-answering", lambda p, xs: p(QUESTIONS, top_k=2, batch_size=2)),
])
def test_batches_padded_past_their_longest_row_answer_the_same(tiny_export, name, call):
    # an engine that rounds batch widths up (OpenVINO: to 16) pads rows past the longest; every
    # task's answer must ignore those tokens as it ignores ordinary padding. Shown on the CPU
    # provider, whose fp32 answers are otherwise exact.
    import dataclasses

    pipe = load(tiny_export(name), providers="cpu")
    want = _plain(call(pipe, MIXED))
    shapes, run = [], pipe.session.run
    pipe.session.run = lambda feeds, outputs=None: (
        shapes.append((feeds["input_ids"].shape[1], feeds["attention_mask"].sum(1).max())),
        run(feeds, outputs))[1]
    pipe.session.config = dataclasses.replace(pipe.session.config, pad_multiple=16)
    got = _plain(call(pipe, MIXED))
    # widths stop at the model's length, and at the longest row a ColBERT text can make
    caps = {pipe.max_length, *(pipe.longest(q) for q in (True, False) if hasattr(pipe, "longest"))}
    assert all(w % 16 == 0 or w in caps for w, _ in shapes)
    assert any(w > longest for w, longest in shapes)   # padded past the longest row: tested
    assert_same(got, want, atol=1e-5)


def test_qa_batched_equals_one_by_one(ours):
    items = [{"question": "where?", "context": c} for c in MIXED]
    batched = ours(QA)(items, top_k=2, batch_size=3)
    assert_same(batched, [ours(QA)(it, top_k=2) for it in items])


def test_micro_batches_pad_right_to_the_longest_in_the_batch(ours):
    pipe = ours(CLS)
    encs = pipe.encode(MIXED)
    lens = [len(e.ids) for e in encs]
    seen = []
    for b in micro_batches(encs, 2, pipe.tokenizer.pad_token_id):
        assert b.input_ids.shape[1] == max(lens[i] for i in b.index)
        for row, i in enumerate(b.index):
            n = lens[i]
            assert b.input_ids[row, :n].tolist() == encs[i].ids
            assert (b.attention_mask[row, :n] == 1).all() and (b.attention_mask[row, n:] == 0).all()
            assert (b.input_ids[row, n:] == pipe.tokenizer.pad_token_id).all()
        seen.extend(b.index.tolist())
    assert sorted(seen) == list(range(len(MIXED)))
    assert [lens[i] for i in seen] == sorted(lens)


# ---------------------------------------------------------------- long inputs

def test_long_text_is_truncated_with_a_warning(ours, caplog):
    long = " ".join(["the cat sat on the mat"] * 40)
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        out = ours(CLS)([long, "a dog"], top_k=None)
    assert "truncated" in caplog.text
    assert len(out) == 2 and all(len(r) == 3 for r in out)
    vec = ours(EMB)(long)
    assert len(vec) == 32 and np.isfinite(vec).all()
    fm = ours("fill-mask")("[MASK] " + long)
    assert len(fm) == 5


def test_fill_mask_mask_truncated_away(ours):
    with pytest.raises(InputError, match="truncated away"):
        ours("fill-mask")(" ".join(["the cat sat on the mat"] * 40) + " [MASK]")


# ---------------------------------------------------------------- torch-free

def test_every_pipeline_runs_with_torch_and_transformers_blocked(tiny_export):
    folders = {n: str(tiny_export(n)) for n in TASK_NAMES}
    code = f"""
import sys, json
sys.modules["torch"] = None           # any import of torch now raises ImportError
sys.modules["transformers"] = None
from bertonnx.runtime import load
f = json.loads({json.dumps(json.dumps(folders))})
print(load(f["fill-mask"])("the cat [MASK] .")[0]["token_str"])
print(load(f["text-classification"])("the cat", top_k=None)[0]["label"])
print(load(f["question-answering"])(question="where?", context="the cat sat on the mat")["answer"])
ner = load(f["token-classification"])
print(len(ner("the cat sat", aggregation_strategy="first", ignore_labels=[])))
print(len(load(f["feature-extraction"])("the cat")))
print(sorted(m for m, mod in sys.modules.items()
             if mod is not None and m.split(".")[0] in ("torch", "transformers", "onnx")))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 6 and lines[-1] == "[]"
    assert lines[4] == "32"


# ---------------------------------------------------------------- errors

def test_errors_are_typed(ours, tiny_export, tmp_path):
    with pytest.raises(InputError, match="no mask token"):
        ours("fill-mask")("no mask here")
    with pytest.raises(InputError, match="empty"):
        ours(CLS)("   ")
    with pytest.raises(InputError, match="empty"):
        ours(EMB)(["a", ""])
    with pytest.raises(InputError, match="max_question_len"):
        ours(QA)(question=" ".join(["what"] * 70), context="the cat")
    with pytest.raises(InputError, match="no room"):
        ours(QA)(question=" ".join(["what"] * 62), context="the cat", max_question_len=100)
    with pytest.raises(InputError, match="max_seq_len"):
        ours(QA)(question="what", context="the cat", max_seq_len=1000)
    with pytest.raises(InputError, match="doc_stride"):
        ours(QA)(question="what", context="the cat", max_seq_len=16, doc_stride=12)
    with pytest.raises(InputError, match="aggregation_strategy"):
        ours(NER)("the cat", aggregation_strategy="longest")
    with pytest.raises(InputError, match="function_to_apply"):
        ours(CLS)("the cat", function_to_apply="relu")
    with pytest.raises(ArtifactError, match="does not exist"):
        load(tmp_path / "nowhere")
    with pytest.raises(TaskMismatchError, match="fill-mask"):
        load(tiny_export("fill-mask"), task="text-classification")
    with pytest.raises(ConfigError, match="not available"):
        load(tiny_export(CLS), providers="tensorrt")


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_damaged_exports(tiny_export, tmp_path, caplog):
    src = tiny_export(CLS)
    d = _copy(src, tmp_path / "flipped")
    data = bytearray((d / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (d / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.onnx is damaged"):
        load(d)
    d = _copy(src, tmp_path / "missing")
    (d / "model.onnx").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        load(d)
    d = _copy(src, tmp_path / "badjson")
    (d / "bertonnx.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ArtifactError, match="not valid JSON"):
        load(d)
    # without its manifest an export is a folder like any other tool's: served, with the
    # warning that nothing vouches for it (runtime/core/foreign.py)
    d = _copy(src, tmp_path / "nomanifest")
    (d / "bertonnx.json").unlink()
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        assert load(d).folder.foreign is not None
    assert "no parity report vouches for it" in caplog.text
    (d / "config.json").unlink()
    with pytest.raises(ArtifactError, match="no config.json"):
        load(d)
    # a manifest that lies about its task is caught by the graph's outputs
    d = _copy(src, tmp_path / "lying")
    m = json.loads((d / "bertonnx.json").read_text())
    m["task"] = "question-answering"
    (d / "bertonnx.json").write_text(json.dumps(m))
    with pytest.raises(ArtifactError, match="does not fit question-answering: no output start_logits"):
        load(d)


# ---------------------------------------------------------------- session

def test_session_feeds_only_declared_inputs(tmp_path):
    """A graph without token_type_ids (as a fused graph may be) still runs from full feeds."""
    onnx = pytest.importorskip("onnx")
    TensorProto, helper = onnx.TensorProto, onnx.helper

    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "t"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "t"])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "t"])
    graph = helper.make_graph([helper.make_node("Add", ["input_ids", "attention_mask"], ["s"]),
                               helper.make_node("Cast", ["s"], ["logits"], to=TensorProto.FLOAT)],
                              "g", [ids, mask], [out])
    path = tmp_path / "m.onnx"
    # IR 8: what opset 17 needs; the installed onnx may default to an IR newer than ORT reads
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    sess = create_session(path, threads=1)
    assert sess.input_names == ("input_ids", "attention_mask")
    a = np.array([[1, 2, 3]])
    got = sess.run({"input_ids": a, "attention_mask": a * 0 + 1, "token_type_ids": a * 0})
    np.testing.assert_array_equal(got["logits"], np.array([[2, 3, 4]], dtype=np.float32))
    assert got["logits"].dtype == np.float32
    with pytest.raises(ArtifactError, match="wants inputs"):
        sess.run({"input_ids": a})
    with pytest.raises(ConfigError, match="optimisation level"):
        create_session(path, optimization="max")
    with pytest.raises(ArtifactError, match="not an ONNX model|cannot load"):
        bad = tmp_path / "bad.onnx"
        bad.write_bytes(b"not a model")
        create_session(bad)


def test_threads_and_providers_reach_the_session(tiny_export):
    pipe = load(tiny_export(EMB), threads=1, providers="cpu")
    assert pipe.session.config.threads == 1
    assert pipe.session.providers == ["CPUExecutionProvider"]


@pytest.mark.parametrize("max_tokens,min_rows", [(2048, 1), (512, 4), (512, 1), (100, 3)])
def test_micro_batches_respect_the_token_budget(max_tokens, min_rows):
    rng = np.random.default_rng(0)
    lengths = list(rng.integers(3, 512, size=300)) + [600, 3]
    encs = [SimpleNamespace(ids=[7] * n, type_ids=[0] * n) for n in lengths]
    seen, batches = [], list(micro_batches(encs, batch_size=32, pad_id=0,
                                           max_tokens=max_tokens, min_rows=min_rows))
    for b, after in zip(batches, batches[1:] + [None]):
        B, T = b.input_ids.shape
        # over the budget only to keep min_rows (the last, longest batch may hold fewer)
        assert B <= 32 and (B * T <= max_tokens or B <= min_rows)
        assert list(b.lengths) == [lengths[i] for i in b.index]
        if after is not None:  # full: the next text would break a limit, or it is 32 wide
            assert B == 32 or (B >= min_rows and (B + 1) * after.lengths[0] > max_tokens)
        seen.extend(b.index.tolist())
    assert sorted(seen) == list(range(len(lengths)))    # every input exactly once


@pytest.mark.parametrize("multiple, limit", [(16, None), (16, 40), (8, 512)])
def test_micro_batches_round_widths_up_within_the_limit(multiple, limit):
    lengths = list(np.random.default_rng(1).integers(2, 60, size=120)) + [1, 45]
    encs = [SimpleNamespace(ids=list(range(1, n + 1)), type_ids=[0] * n) for n in lengths]
    seen = []
    for b in micro_batches(encs, batch_size=8, pad_id=0, max_tokens=256, min_rows=1,
                           multiple=multiple, limit=limit):
        B, T = b.input_ids.shape
        longest = max(lengths[i] for i in b.index)
        assert T == (longest if limit is not None and longest > limit
                     else min(-(-longest // multiple) * multiple, limit or 10**9))
        assert B * T <= 256 or B == 1   # the budget counts the padded width
        for row, i in enumerate(b.index):   # every row whole, masked to its own length
            assert b.lengths[row] == lengths[i] and b.attention_mask[row].sum() == lengths[i]
            assert b.input_ids[row, :lengths[i]].tolist() == encs[i].ids
        seen.extend(b.index.tolist())
    assert sorted(seen) == list(range(len(lengths)))
