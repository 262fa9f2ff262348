"""`finetune` for the three tasks on tiny synthetic data: it learns, writes eval_results.json,
saves a model transformers loads with its labels; bad data stops it before any step."""
from __future__ import annotations

import json
import random

import pytest
import torch
import transformers

from bertonnx.build import TASKS, load_pretrained
from bertonnx.build.train import FinetuneConfig, TrainConfig, finetune
from bertonnx.runtime.cli import main

_POS, _NEG = ["happy", "good", "great"], ["sad", "little", "old"]


def _classification(path, n=160, seed=0):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        f.write("text,label\n")
        for _ in range(n):
            lab = rng.choice(["pos", "neg", "other"])
            word = {"pos": rng.choice(_POS), "neg": rng.choice(_NEG), "other": "river"}[lab]
            f.write(f"the {rng.choice(['cat', 'dog', 'man'])} was {word},{lab}\n")
    return path


def _tokens(path, n=80, seed=0):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            city = rng.choice(["paris", "london"])
            who = rng.choice(["he", "she"])
            f.write(json.dumps({"tokens": [who, "came", "from", city, "."],
                                "tags": ["B-PER", "O", "O", "B-LOC", "O"]}) + "\n")
    return path


def _squad(path, n=40, seed=0):
    rng = random.Random(seed)
    paras = []
    for i in range(n):
        city = rng.choice(["paris", "london"])
        ctx = f"the old man was happy . he came from {city} . the dog sat on the mat ."
        qas = [{"id": f"q{i}", "question": "where did he come from ?",
                "answers": [{"text": city, "answer_start": ctx.index(city)}]}]
        if i % 4 == 0:
            qas.append({"id": f"n{i}", "question": "who was sad ?", "answers": [],
                        "is_impossible": True})
        paras.append({"context": ctx, "qas": qas})
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": paras}]}),
                    encoding="utf-8")
    return path


def _run(base, task, data, out, steps=80, **kw):
    return finetune(FinetuneConfig(model=str(base), task=task, train_file=data, eval_file=data,
                                   max_seq_len=32, train=TrainConfig(
                                       out=out, max_steps=steps, batch_size=8, lr=5e-3,
                                       warmup=0.1, progress=False, save_every=1000), **kw))


@pytest.mark.parametrize("task,make,metric,bar", [
    ("text-classification", _classification, "accuracy", 0.95),
    ("token-classification", _tokens, "f1", 0.95),
    ("question-answering", _squad, "f1", 80.0),
])
def test_finetune_learns_and_saves_for_transformers(tiny_hf_checkpoint, tmp_path, task, make,
                                                    metric, bar):
    base = tiny_hf_checkpoint("fill-mask", max_position_embeddings=64)
    suffix = ".json" if task == "question-answering" else (
        ".jsonl" if task == "token-classification" else ".csv")
    data = make(tmp_path / f"data{suffix}")
    out = tmp_path / "out"
    result = _run(base, task, data, out, doc_stride=8)
    assert result[metric] >= bar, result          # separable toy data: it must be learnt
    assert json.loads((out / "eval_results.json").read_text()) == result
    hf_cls = getattr(transformers, TASKS[task].hf_class)
    hf, info = hf_cls.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ours = load_pretrained(out, task)
    if task != "question-answering":
        assert hf.config.id2label == ours.config.id2label
        assert len(ours.config.id2label) == (3 if task == "text-classification" else 3)
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        a, b = ours(ids), hf.eval()(ids)
    a = a if isinstance(a, tuple) else (a,)
    b = (b.start_logits, b.end_logits) if task == "question-answering" else (b.logits,)
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=1e-4)
    assert transformers.BertTokenizerFast.from_pretrained(out).vocab_size == \
        transformers.BertTokenizerFast.from_pretrained(base).vocab_size


def test_grad_accum_equals_bigger_batch(tiny_hf_checkpoint, tmp_path):
    """Micro-batch 4 x accumulation 2 takes the same steps as batch 8 (dropout off)."""
    base = tiny_hf_checkpoint("fill-mask", hidden_dropout_prob=0.0,
                              attention_probs_dropout_prob=0.0)
    data = _classification(tmp_path / "d.csv", n=64)
    curves = []
    for name, bs, acc in (("big", 8, 1), ("acc", 4, 2)):
        finetune(FinetuneConfig(model=str(base), task="text-classification", train_file=data,
                                max_seq_len=32, train=TrainConfig(
                                    out=tmp_path / name, max_steps=6, batch_size=bs,
                                    grad_accum=acc, lr=1e-3, log_every=1, progress=False)))
        log = (tmp_path / name / "train_log.jsonl").read_text().splitlines()
        curves.append([json.loads(x)["loss"] for x in log])
    assert len(curves[0]) == 6
    assert curves[0] == pytest.approx(curves[1], abs=1e-5)


def test_bad_data_fails_before_training(tiny_hf_checkpoint, tmp_path, capsys):
    base = str(tiny_hf_checkpoint("fill-mask"))
    no_label = tmp_path / "nl.jsonl"
    no_label.write_text('{"text": "the cat"}\n', encoding="utf-8")
    sq = tmp_path / "sq.json"
    sq.write_text(json.dumps({"data": [{"paragraphs": [{"context": "he came from paris .", "qas": [
        {"id": "x1", "question": "where ?", "answers": [{"text": "paris",
                                                          "answer_start": 0}]}]}]}]}))
    ok = _classification(tmp_path / "ok.csv")
    unseen = tmp_path / "unseen.csv"
    unseen.write_text("text,label\nthe cat,surprise\n", encoding="utf-8")
    cases = [(["--task", "text-classification", "--train", str(no_label)], "has no label"),
             (["--task", "question-answering", "--train", str(sq)],
              "x1 does not occur at answer_start 0"),
             (["--task", "text-classification", "--train", str(ok), "--eval", str(unseen)],
              "not in the training data: surprise"),
             (["--task", "text-classification", "--train", str(ok), "--max-seq-len", "4096"],
              "exceeds the model's")]
    for i, (args, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        capsys.readouterr()
        code = main(["finetune", base, *args, "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and message in err, err
        assert not out.exists()
