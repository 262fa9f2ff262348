"""`bertonnx rerank` and `bertonnx zero-shot` (issue 27): JSON equals the library, documents
from arguments or --input, tables, and one-line errors with exit ≠ 0."""
from __future__ import annotations

import pytest

from tests.cli.test_inference import run, run_json
from tests.runtime._compare import assert_same

RANK, ZS = "text-ranking", "zero-shot-classification"
DOCS = ["the dog ran to the river", "a cat sat on the mat", "paris is a city"]


def test_rerank(capsys, tiny_export, ours, tmp_path):
    folder, pipe = tiny_export(RANK), ours(RANK)
    assert_same(run_json(capsys, "rerank", folder, "--query", "the cat", *DOCS),
                pipe("the cat", DOCS))
    assert_same(run_json(capsys, "rerank", folder, "-q", "the cat", *DOCS, "--top-k", 2,
                         "--return-documents", "--raw-scores"),
                pipe("the cat", DOCS, top_k=2, return_documents=True, raw_scores=True))
    # --query with --input: the file's lines are the documents
    lines = tmp_path / "docs.txt"
    lines.write_text("\n".join(DOCS) + "\n", encoding="utf-8")
    assert_same(run_json(capsys, "rerank", folder, "-q", "the cat", "--input", lines),
                pipe("the cat", DOCS))
    # without --query: one ranking per {"query", "documents"} line
    jsonl = tmp_path / "rankings.jsonl"
    jsonl.write_text('{"query": "the cat", "documents": ["a cat", "the river"]}\n'
                     '{"query": "paris", "documents": ["a city"]}\n', encoding="utf-8")
    assert_same(run_json(capsys, "rerank", folder, "--input", jsonl),
                pipe([{"query": "the cat", "documents": ["a cat", "the river"]},
                      {"query": "paris", "documents": ["a city"]}]))
    rc, out, _ = run(capsys, "rerank", folder, "-q", "the cat", *DOCS)
    best = pipe("the cat", DOCS)[0]
    assert rc == 0 and "rank" in out and DOCS[best["corpus_id"]] in out.splitlines()[3]


def test_zero_shot(capsys, tiny_export, ours):
    folder, pipe = tiny_export(ZS), ours(ZS)
    texts = ["the cat sat on the mat", "london music"]
    assert_same(run_json(capsys, "zero-shot", folder, *texts, "--candidate-labels",
                         "music,city,cat"), pipe(texts, candidate_labels=["music", "city", "cat"]))
    assert_same(run_json(capsys, "zero-shot", folder, texts[0], "--candidate-labels", "a,b",
                         "--multi-label", "--hypothesis-template", "it is about {} ."),
                pipe(texts[0], candidate_labels=["a", "b"], multi_label=True,
                     hypothesis_template="it is about {} ."))
    rc, out, _ = run(capsys, "zero-shot", folder, texts[0], "--candidate-labels", "music,city")
    assert rc == 0 and "music" in out and "city" in out and "score" in out


@pytest.mark.parametrize("argv, message", [
    (["rerank", "{rank}", "a doc"], "no --query"),
    (["rerank", "{rank}", "-q", "the cat"], "no documents to rank"),
    (["rerank", "{rank}", "-q", "the cat", "a", "--input", "{docs}"], "not both"),
    (["rerank", "{rank}", "--input", "{docs}"], "holds documents but no --query"),
    (["rerank", "{rank}", "-q", "the cat", "a", "--top-k", "0"],
     "--top-k': 0 is not in the range"),
    (["rerank", "{zs}", "-q", "the cat", "a"], "exported for zero-shot-classification"),
    (["zero-shot", "{zs}", "the cat"], "candidate_labels is required"),
    (["zero-shot", "{zs}", "the cat", "--candidate-labels", ","], "names no label"),
    (["zero-shot", "{zs}", "the cat", "--candidate-labels", "a",
      "--hypothesis-template", "no slot"], "hypothesis_template must be a string with"),
])
def test_errors_are_one_line(capsys, tiny_export, tmp_path, argv, message):
    (tmp_path / "docs.txt").write_text("a cat\nthe river\n", encoding="utf-8")
    paths = {"rank": tiny_export(RANK), "zs": tiny_export(ZS), "docs": tmp_path / "docs.txt"}
    rc, _, err = run(capsys, *[a.format(**paths) for a in argv])
    lines = err.strip().splitlines()
    assert rc != 0 and len(lines) == 1 and lines[0].startswith("bertonnx: error:"), err
    assert message in lines[0]
