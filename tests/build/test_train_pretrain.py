"""`pretrain` on a small synthetic corpus: the loss falls, checkpoints load in transformers and
in bertonnx, --resume continues with the very losses of an uninterrupted run."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers

from bertonnx.build import BertConfig, build_model, load_pretrained
from bertonnx.build.train import PretrainConfig, TrainConfig, pretrain
from bertonnx.runtime.cli import main

from ._corpus import make_corpus, make_tokenizer

TINY = {"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64}


@pytest.fixture
def setup(tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt")
    tok = make_tokenizer(tmp_path / "tok", corpus)
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY), encoding="utf-8")
    return corpus, tok, cfg


def run(setup, out, **kw):
    corpus, tok, cfg = setup
    train = dict(out=out, batch_size=8, lr=3e-3, warmup=0.1, log_every=1, progress=False)
    train.update(kw.pop("train", {}))
    return pretrain(PretrainConfig(corpus=(corpus,), tokenizer=tok, model=str(cfg), seq_len=32,
                                   train=TrainConfig(**train), **kw))


def losses(out):
    recs = [json.loads(x) for x in (out / "train_log.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in recs if "loss" in r}


def test_loss_falls_and_outputs_load_in_transformers(setup, tmp_path):
    out = tmp_path / "run"
    result = run(setup, out, train={"max_steps": 40, "save_every": 20})
    curve = losses(out)
    assert sorted(curve) == list(range(1, 41))
    first, last = sum(curve[s] for s in range(1, 6)) / 5, sum(curve[s] for s in range(36, 41)) / 5
    # From ~ln(V) = 4.6 (a uniform guess) toward the corpus' unigram entropy (3.5 nats): a fall
    # of half a nat is ~5x the step-to-step noise of these 5-step means.
    assert last < first - 0.5, (first, last)
    assert set(result) >= {"mlm_accuracy", "unigram_baseline_accuracy", "masked_positions"}
    assert result["masked_positions"] > 0
    assert json.loads((out / "eval_results.json").read_text()) == result
    for folder in (out, out / "checkpoint-20"):
        hf, info = transformers.BertForMaskedLM.from_pretrained(folder, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
        ours = load_pretrained(folder, "fill-mask")
        ids = torch.tensor([[2, 10, 11, 12, 3]])
        with torch.no_grad():
            assert torch.allclose(ours(ids), hf.eval()(ids).logits, atol=1e-4)
    assert transformers.BertTokenizerFast.from_pretrained(out).vocab_size == 100


def test_resume_continues_with_the_same_losses(setup, tmp_path):
    full = tmp_path / "full"
    run(setup, full, train={"max_steps": 12, "save_every": 6, "keep_checkpoints": 2})
    # An interrupted run: only its step-6 checkpoint survives (and a log past it, to be trimmed).
    part = tmp_path / "part"
    part.mkdir()
    shutil.copytree(full / "checkpoint-6", part / "checkpoint-6")
    (part / "train_log.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 0.0}) + "\n" for s in range(1, 9)))
    run(setup, part, train={"max_steps": 12, "save_every": 6, "resume": True})
    a, b = losses(full), losses(part)
    assert sorted(b) == list(range(1, 13))
    for s in range(7, 13):  # dropout is on: equal only if the RNG was restored too
        assert b[s] == pytest.approx(a[s], abs=1e-6), s
    assert b[6] == 0.0  # records up to the checkpoint were kept, later ones redone


def test_nsp_whole_word_mask_loads_as_bert_for_pretraining(setup, tmp_path):
    out = tmp_path / "nsp"
    run(setup, out, nsp=True, whole_word_mask=True, train={"max_steps": 3})
    hf, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert load_pretrained(out, "pretraining").config.vocab_size == 100


def test_line_by_line_trains_and_evaluates_on_lines(setup, tmp_path):
    out = tmp_path / "lines"
    result = run(setup, out, line_by_line=True, eval_fraction=0.2, train={"max_steps": 3})
    assert result["masked_positions"] > 0
    assert transformers.BertForMaskedLM.from_pretrained(out).config.vocab_size == 100


def test_bad_input_fails_before_training(setup, tmp_path, capsys):
    corpus, tok, _ = setup
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    cases = [([str(corpus), "--config", "gigantic"], "unknown preset 'gigantic'"),
             ([str(empty), "--config", "tiny"], "has no text"),
             ([str(corpus), "--config", "tiny", "--seq-len", "1000"], "max_position_embeddings"),
             ([str(tmp_path / "missing.txt")], "does not exist"),
             ([str(corpus), "--nsp", "--line-by-line"], "do not go together")]
    for i, (args, message) in enumerate(cases):
        out = tmp_path / f"out{i}"
        capsys.readouterr()
        code = main(["pretrain", *args, "--tokenizer", str(tok), "--out", str(out)])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and message in err, err
        assert not out.exists()


@pytest.mark.parametrize("task", ["fill-mask", "pretraining"])
def test_mlm_positions_decode_only_the_masked_rows(task):
    """Pretraining decodes only the masked positions; those rows equal the full logits'."""
    torch.manual_seed(0)
    model = build_model(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=32,
                                   max_position_embeddings=16), task).eval()
    ids = torch.randint(0, 50, (3, 7))
    sel = torch.rand(3, 7) < 0.4
    full, sparse = model(ids), model(ids, mlm_positions=sel)
    if task == "pretraining":
        assert torch.equal(full[1], sparse[1])
        full, sparse = full[0], sparse[0]
    assert sparse.shape == (int(sel.sum()), 50)
    torch.testing.assert_close(sparse, full[sel], rtol=0, atol=1e-6)
