"""`bertonnx run` on a reranking export (rows {"query", "documents"}: a list field, from JSONL
or a Parquet list<string> column; a CSV cell cannot hold one) and on a zero-shot export (its
labels given once for the job, or the job refused in one line before any row runs)."""
from __future__ import annotations

from tests.runtime._compare import assert_same
from tests.runtime.bulk._helpers import bulk, read_output, write_input

RANK, ZS = "text-ranking", "zero-shot-classification"
ROWS = [{"id": "a", "query": "the cat", "documents": ["a cat sat", "the river", "paris"]},
        {"id": "b", "query": "music", "documents": ["london music and film"]},
        {"id": "c", "query": "the dog", "documents": "one text, not a list"},
        {"id": "d", "query": "paris", "documents": []}]


def test_rerank_rows_from_jsonl_and_parquet(capsys, tiny_export, ours, tmp_path):
    folder, pipe = tiny_export(RANK), ours(RANK)
    want = [pipe(r["query"], r["documents"], top_k=2) for r in (ROWS[0], ROWS[1], ROWS[3])]
    for fmt, rows in (("jsonl", ROWS), ("parquet", [ROWS[0], ROWS[1], ROWS[3]])):
        src = write_input(tmp_path / f"in.{fmt}", fmt, rows)   # Parquet: list<string>
        out = tmp_path / f"out-{fmt}.jsonl"
        rc, _, err = bulk(capsys, folder, "--input", src, "--output", out, "--no-progress",
                          "--top-k", "2", "--max-errors", "1")
        assert rc == 0, err
        got = {r["id"]: r for r in read_output(out)}
        assert list(got) == [r["id"] for r in rows]
        assert_same([got[i]["result"] for i in "abd"], want, where=fmt)
        if "c" in got:
            assert "the documents are a str, not a list of strings" in got["c"]["error"]
    # a CSV cell holds one text: every row says so, none runs
    src = write_input(tmp_path / "in.csv", "csv", ROWS[:2])
    rc, _, _ = bulk(capsys, folder, "--input", src, "--output", tmp_path / "c.jsonl",
                    "--no-progress", "--max-errors", "2")
    assert rc == 0
    assert all("a CSV cell holds one text" in r["error"]
               for r in read_output(tmp_path / "c.jsonl"))


def test_zero_shot_rows_and_a_job_without_labels(capsys, tiny_export, ours, tmp_path):
    folder, pipe = tiny_export(ZS), ours(ZS)
    texts = ["the cat sat on the mat", "london music"]
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": t} for t in texts])
    out = tmp_path / "out.jsonl"
    rc, _, err = bulk(capsys, folder, "--input", src, "--output", out, "--no-progress",
                      "--candidate-labels", "music,city", "--multi-label")
    assert rc == 0, err
    assert_same([r["result"] for r in read_output(out)],
                pipe(texts, candidate_labels=["music", "city"], multi_label=True))
    rc, _, err = bulk(capsys, folder, "--input", src, "--output", tmp_path / "no.jsonl")
    assert rc == 2 and "candidate_labels is required" in err and err.count("\n") == 1
    assert not (tmp_path / "no.jsonl").exists()
