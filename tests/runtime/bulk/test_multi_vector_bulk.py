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
