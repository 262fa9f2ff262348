"""`bertonnx run` on a ColBERT (multi-vector) export: each row's token vectors, as the library
gives them, written as nested lists to JSONL and to Parquet (a JSON string per row)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from bertonnx.runtime.cli import main

TEXTS = ["the cat sat on the mat , by the river", "paris", "a dog ran to the house"]


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_run_writes_each_row_s_token_vectors(tiny_export, ours, tmp_path, suffix):
    pipe = ours("multi-vector")
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS), encoding="utf-8")
    out = tmp_path / f"out.{suffix}"
    assert main(["run", str(tiny_export("multi-vector")), "--input", str(source), "--output",
                 str(out), "--is-query"]) == 0
    if suffix == "jsonl":
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        results = [r["result"] for r in rows]
    else:
        import pyarrow.parquet as pq  # the parquet extra: only this case needs it

        results = [json.loads(x) for x in pq.read_table(out)["result"].to_pylist()]
    for got, want in zip(results, pipe(TEXTS, is_query=True)):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_ranking_rows_are_ranked_by_maxsim_beside_text_rows(tiny_export, ours, tmp_path):
    """A row with a query and documents is ranked (text-ranking's fields) as the library ranks
    it; a text row in the same chunk still gets its vectors."""
    pipe = ours("multi-vector")
    rows = [{"id": "q", "query": "the cat", "documents": TEXTS},
            {"id": "t", "text": TEXTS[0]},
            {"id": "r", "query": "a dog", "documents": TEXTS[1:]}]
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["run", str(tiny_export("multi-vector")), "--input", str(source), "--output",
                 str(out)]) == 0
    got = {r["id"]: r["result"] for r in map(json.loads, out.read_text().splitlines())}
    for key, query, docs in (("q", "the cat", TEXTS), ("r", "a dog", TEXTS[1:])):
        want = pipe.rank(query, docs)
        assert [g["corpus_id"] for g in got[key]] == [w["corpus_id"] for w in want]
        np.testing.assert_allclose([g["score"] for g in got[key]],
                                   [w["score"] for w in want], atol=1e-5, rtol=0)
    np.testing.assert_allclose(got["t"], pipe(TEXTS[0]), atol=1e-6, rtol=0)
