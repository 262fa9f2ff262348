"""`bertonnx embed-m3` on a BGE-M3 export: the library's three outputs as JSON and as a table,
the outputs left out on request, and nothing asked for refused in one line."""
from __future__ import annotations

import json

import numpy as np

from bertonnx.runtime.cli import main

TEXTS = ["the cat sat on the mat", "paris"]


def test_embed_m3_prints_the_library_s_outputs(tiny_export, ours, capsys):
    folder, pipe = str(tiny_export("bge-m3")), ours("bge-m3")
    assert main(["embed-m3", folder, *TEXTS, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    for g, want in zip(got, pipe(TEXTS)):
        np.testing.assert_allclose(g["dense_vecs"], want["dense_vecs"], atol=1e-6)
        np.testing.assert_allclose(g["colbert_vecs"], want["colbert_vecs"], atol=1e-6)
        assert g["lexical_weights"] == want["lexical_weights"]
    assert main(["embed-m3", folder, TEXTS[0], "--no-return-dense", "--no-return-colbert-vecs",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "lexical_weights": pipe(TEXTS[0])["lexical_weights"]}
    assert main(["embed-m3", folder, *TEXTS]) == 0
    out = capsys.readouterr().out
    colbert = pipe(TEXTS[0])["colbert_vecs"]
    assert "lexical weights" in out and f"{colbert.shape[0]} x {colbert.shape[1]}" in out
    assert main(["embed-m3", folder, "a", "--no-return-dense", "--no-return-sparse",
                 "--no-return-colbert-vecs"]) != 0
    err = capsys.readouterr().err
    assert "nothing to answer" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
