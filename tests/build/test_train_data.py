"""Training building blocks without a training loop: losses vs transformers, masking statistics,
packing and NSP pairs, data readers' errors, metrics against hand-computed references."""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from bertonnx.build import losses
from bertonnx.build.train import datasets as ds
from bertonnx.build.train import metrics
from bertonnx.build.train.masking import mask_tokens, sample_uniform
from bertonnx.build.train.pretraining import (Masker, line_by_line, nsp_instances, pack,
                                              read_documents)
from bertonnx.runtime.core.errors import InputError
from bertonnx.runtime.core.tokenizer import load_tokenizer

from ._corpus import make_corpus, make_tokenizer


@pytest.fixture
def tok(tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt")
    return load_tokenizer(make_tokenizer(tmp_path / "tok", corpus))


@pytest.fixture(autouse=True)
def _no_grad():
    with torch.no_grad():  # nothing here trains; float() of a grad tensor only warns
        yield


# -- losses equal transformers' own --------------------------------------------------------
def _hf(cls, **kw):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=20, **kw)
    return cls(cfg).eval()


@pytest.mark.parametrize("problem", ["single_label_classification", "multi_label_classification",
                                     "regression"])
def test_classification_loss_matches_hf(problem):
    num_labels = 1 if problem == "regression" else 3
    model = _hf(transformers.BertForSequenceClassification, num_labels=num_labels)
    ids = torch.randint(5, 50, (4, 7))
    labels = {"single_label_classification": torch.tensor([0, 2, 1, 1]),
              "multi_label_classification": torch.tensor([[1., 0, 1], [0, 0, 1], [1, 1, 0],
                                                          [0, 0, 0]]),
              "regression": torch.tensor([0.5, -1.0, 2.0, 0.0])}[problem]
    out = model(ids, labels=labels)
    assert model.config.problem_type == problem  # HF inferred the same type we infer
    ours = losses.classification_loss(out.logits, labels)
    assert abs(float(ours) - float(out.loss)) <= 1e-6


def test_mlm_token_span_losses_match_hf():
    ids = torch.randint(5, 50, (3, 9))
    labels = torch.full_like(ids, losses.IGNORE)
    labels[:, 2], labels[0, 5] = ids[:, 2], ids[0, 5]
    out = _hf(transformers.BertForMaskedLM)(ids, labels=labels)
    assert abs(float(losses.mlm_loss(out.logits, labels)) - float(out.loss)) <= 1e-6
    out = _hf(transformers.BertForTokenClassification, num_labels=4)(
        ids, labels=labels.clamp(max=3).masked_fill(labels == losses.IGNORE, losses.IGNORE))
    tl = labels.clamp(max=3).masked_fill(labels == losses.IGNORE, losses.IGNORE)
    assert abs(float(losses.token_classification_loss(out.logits, tl)) - float(out.loss)) <= 1e-6
    start, end = torch.tensor([1, 0, 30]), torch.tensor([3, 0, 40])  # 30/40: past T, ignored
    out = _hf(transformers.BertForQuestionAnswering)(ids, start_positions=start,
                                                     end_positions=end)
    ours = losses.span_loss(out.start_logits, out.end_logits, start, end)
    assert abs(float(ours) - float(out.loss)) <= 1e-6
    pt = _hf(transformers.BertForPreTraining)(ids, labels=labels,
                                              next_sentence_label=torch.tensor([0, 1, 0]))
    ours = losses.pretraining_loss(pt.prediction_logits, pt.seq_relationship_logits, labels,
                                   torch.tensor([0, 1, 0]))
    assert abs(float(ours) - float(pt.loss)) <= 1e-6


# -- masking -------------------------------------------------------------------------------
def test_masking_statistics():
    B, T, V, MASK = 400, 256, 1000, 4
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, V, (B, T), generator=g)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    special[: B // 2, T // 2:] = True  # padding on half the rows
    ids[special] = 0
    u = sample_uniform(7, list(range(B)), T)
    out, labels = mask_tokens(ids, special, u, mask_id=MASK, vocab_size=V)
    sel = labels != losses.IGNORE
    assert not sel[special].any()                       # specials are never chosen
    assert (out[special] == ids[special]).all()         # nor changed
    assert torch.equal(labels[sel], ids[sel])
    n = int((~special).sum())
    rate = int(sel.sum()) / n
    assert abs(rate - 0.15) < 4 * (0.15 * 0.85 / n) ** 0.5   # 4 sigma of a binomial
    k = int(sel.sum())
    masked = int((out[sel] == MASK).sum()) / k
    same = int((out[sel] == ids[sel]).sum()) / k
    other = 1 - masked - same
    sd = lambda p: 4 * (p * (1 - p) / k) ** 0.5  # noqa: E731
    assert abs(masked - 0.8) < sd(0.8)
    assert abs(same - (0.1 + 0.1 / V)) < sd(0.1)    # kept, or a random draw of itself
    assert abs(other - 0.1) < sd(0.1)
    assert not (out[~sel] != ids[~sel]).any()           # unselected positions untouched


def test_whole_word_masking_takes_words_whole():
    B, T = 200, 40
    ids = torch.arange(10, 10 + T).repeat(B, 1)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = True
    word_start = torch.ones(B, T, dtype=torch.bool)
    word_start[:, 2::3] = False                          # every third piece continues a word
    u = sample_uniform(1, list(range(B)), T)
    _, labels = mask_tokens(ids, special, u, mask_id=4, vocab_size=100, word_start=word_start)
    sel = labels != losses.IGNORE
    cont = ~word_start
    cont[:, 0] = False
    prev = torch.zeros_like(sel)
    prev[:, 1:] = sel[:, :-1]
    assert torch.equal(sel[cont], prev[cont])            # a continuation goes with its head
    assert 0.10 < float(sel[:, 1:].float().mean()) < 0.20


def test_masker_never_selects_specials_of_real_sequences(tok):
    docs = [[f"the cat sat on the mat {i}." for i in range(30)]]
    ids = [[e.ids for e in tok.backend.encode_batch(d, add_special_tokens=False)] for d in docs]
    feats = pack(ids, tok, 24)
    b = Masker(tok, 0.5, whole_word=True)(feats, torch.arange(feats["input_ids"].shape[0]), 3)
    orig = feats["input_ids"]
    specials = torch.isin(orig, torch.tensor([tok.cls_token_id, tok.sep_token_id,
                                              tok.pad_token_id]))
    assert specials.any() and not (b["labels"][specials] != losses.IGNORE).any()
    assert (b["labels"] != losses.IGNORE).any()


# -- packing and NSP -----------------------------------------------------------------------
def test_pack_fills_sequences(tok):
    lines = [[tok.backend.encode(f"a man walked to the city {i}.", add_special_tokens=False).ids
              for i in range(50)]]
    stream = [t for line in lines[0] for t in line]
    feats = pack(lines, tok, 32)
    full = feats["attention_mask"].sum(1)
    assert (full[:-1] == 32).all()                       # every block but the tail is full
    body = feats["input_ids"][:, 1:-1][feats["attention_mask"][:, 2:] == 1]
    assert body.tolist() == stream[:len(body)]           # the stream, in order
    assert (feats["input_ids"][:, 0] == tok.cls_token_id).all()


def test_line_by_line_is_one_sequence_per_line(tok):
    texts = ["a man walked .", "the city is big and the man walked to it every day " * 3, "x"]
    lines = [[tok.backend.encode(t, add_special_tokens=False).ids for t in texts[:2]],
             [tok.backend.encode(texts[2], add_special_tokens=False).ids]]
    feats = line_by_line(lines, tok, 16)
    ids, mask = feats["input_ids"], feats["attention_mask"]
    assert ids.shape == (3, 16)
    for row, line in zip(range(3), [lines[0][0], lines[0][1], lines[1][0]]):
        body = line[:14]                                 # cut at T - 2, never spilling over
        n = len(body) + 2
        assert ids[row, :n].tolist() == [tok.cls_token_id, *body, tok.sep_token_id]
        assert mask[row].tolist() == [1] * n + [0] * (16 - n)
        assert (ids[row, n:] == tok.pad_token_id).all()


def test_nsp_pairs(tok, tmp_path):
    docs = read_documents((make_corpus(tmp_path / "c.txt", lines=300, docs=10),))
    ids = [[e.ids for e in tok.backend.encode_batch(d, add_special_tokens=False)] for d in docs]
    f = nsp_instances(ids, tok, 48, seed=0)
    labels = f["next_sentence_label"]
    assert 0.3 < float(labels.float().mean()) < 0.7      # about half random
    for row, types, mask in zip(f["input_ids"], f["token_type_ids"], f["attention_mask"]):
        n = int(mask.sum())
        seps = (row[:n] == tok.sep_token_id).nonzero().flatten().tolist()
        assert len(seps) == 2 and seps[1] == n - 1 and row[0] == tok.cls_token_id
        assert (types[:seps[0] + 1] == 0).all() and (types[seps[0] + 1:n] == 1).all()


# -- readers reject bad input --------------------------------------------------------------
def test_readers_reject_bad_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(InputError, match="no text"):
        read_documents((empty,))
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nhello,pos\nworld,\n", encoding="utf-8")
    with pytest.raises(InputError, match="record 2 has no label"):
        ds.read_classification(bad)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\ncaf\xe9,pos\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        ds.read_classification(latin)
    tags = tmp_path / "t.jsonl"
    tags.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="2 tokens but 1 tags"):
        ds.read_token_classification(tags)
    sq = tmp_path / "sq.json"
    sq.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Paris is big.", "qas": [
        {"id": "q1", "question": "What?", "answers": [{"text": "big", "answer_start": 3}]}]}]}]}))
    with pytest.raises(InputError, match="q1 does not occur at answer_start 3"):
        ds.read_squad(sq)


def test_squad_windows_locate_answers(tok):
    ctx = " ".join(f"the dog sat on the mat {i}." for i in range(12)) + " paris is old."
    ex = ds.SquadExample("q", "where?", ctx, [{"text": "paris", "answer_start": ctx.index("paris")}])
    f = ds.squad_features([ex], tok, 32, stride=8, max_query=8)
    n = f.tensors["input_ids"].shape[0]
    assert n > 2                                           # the context needed several windows
    hits = 0
    for k in range(n):
        s, e = int(f.tensors["start_positions"][k]), int(f.tensors["end_positions"][k])
        if s:
            hits += 1
            span = ctx[f.offsets[k][s][0]:f.offsets[k][e][1]]
            assert span == "paris"
    assert hits >= 1                                       # found in every window that holds it


# -- metrics -------------------------------------------------------------------------------
def test_metrics_against_hand_computed():
    gold, pred = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]
    # per class F1: c0 tp1 fp1 fn1 -> .5; c1 tp2 fp1 fn0 -> .8; c2 tp1 fp0 fn1 -> 2/3
    assert metrics.macro_f1(gold, pred) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert metrics.accuracy(gold, pred) == pytest.approx(4 / 6)
    g = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    p = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O"]]  # IOB1-style I- starts a chunk
    r = metrics.entity_prf(g, p)
    assert (r["precision"], r["recall"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert metrics.entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == {
        ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)}
    assert metrics.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    s = metrics.squad_scores({"a": ["the Paris", "Lyon"], "b": []},
                             {"a": "paris france", "b": ""})
    assert s["exact_match"] == pytest.approx(50.0)       # b right (empty), a not exact
    assert s["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)  # a: P=1/2, R=1 -> 2/3


def test_text_pair_is_decided_per_record(tok, tmp_path):
    """A file whose first record is a single text still pairs the later records that have a
    text_pair, and a record without one stays a single sequence (no empty second segment)."""
    path = tmp_path / "mixed.jsonl"
    rows = [{"text": "the cat sat", "label": "a"},
            {"text": "the cat sat", "text_pair": "on the mat", "label": "b"},
            {"text": "the dog ran", "label": "a"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = ds.read_classification(path)
    assert data.pairs == [None, "on the mat", None]
    feats = ds.classification_features(data, tok, 32, {"a": 0, "b": 1})
    tt, mask = feats["token_type_ids"], feats["attention_mask"]
    assert tt[1].sum() > 0 and tt[0].sum() == 0 and tt[2].sum() == 0
    # the single texts are exactly their own encodings: [CLS] text [SEP], nothing appended
    single = tok.encode_batch(["the cat sat"])[0]
    assert int(mask[0].sum()) == len(single.ids)
    only_single = tmp_path / "single.jsonl"
    only_single.write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    assert ds.read_classification(only_single).pairs is None
