"""`bertonnx embed-multi` and `bertonnx rerank` on a ColBERT (multi-vector) export: the library's
token vectors and MaxSim ranking, as JSON and as tables; a cross-encoder option refused in one
line."""
from __future__ import annotations

import json

import numpy as np

from bertonnx.runtime.cli import main

DOCS = ["the cat sat on the mat", "paris is a city", "a dog ran"]


def test_embed_multi_prints_the_library_s_vectors(tiny_export, ours, capsys):
    folder, pipe = str(tiny_export("multi-vector")), ours("multi-vector")
    assert main(["embed-multi", folder, "who has a cat", "--is-query", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(got, pipe("who has a cat", is_query=True), atol=1e-6)
    assert main(["embed-multi", folder, *DOCS]) == 0
    out = capsys.readouterr().out
    assert "document text" in out and f"{len(pipe(DOCS[0]))}" in out


def test_rerank_ranks_by_maxsim_on_a_colbert_export(tiny_export, ours, capsys):
    folder, pipe = str(tiny_export("multi-vector")), ours("multi-vector")
    assert main(["rerank", folder, "--query", "who has a cat", *DOCS, "--top-k", "2",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == pipe.rank("who has a cat", DOCS, top_k=2)
    assert main(["rerank", folder, "-q", "who has a cat", *DOCS, "--raw-scores"]) != 0
    err = capsys.readouterr().err
    assert "--raw-scores does not apply to a multi-vector export" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["classify", folder, "a"]) != 0
    assert "embed-multi" in capsys.readouterr().err
