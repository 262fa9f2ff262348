"""Tiny random PyLate ColBERT folders and PyLate's own outputs on them, for the multi-vector tests.

Run by the tests in the references' environment (tests/references.py), from the repository root:

    REFERENCES_PYTHON -m tests.colbert_reference OUT

For each case in CASES it saves `OUT/<case>/` with pylate (models.ColBERT(...).save: a
sentence-transformers folder with pylate's Dense module and its config_sentence_transformers.json)
and `OUT/<case>.npz`: ColBERT.encode of QUERIES (is_query=True) and DOCUMENTS (is_query=False) as
q0.., d0.., and pylate.rank.rerank's scores of each query against every document (scores, an
(len(QUERIES), len(DOCUMENTS)) array in document order). torch, pylate: imported in main() only,
so the tests can read the texts and cases from the suite's environment.
"""
from __future__ import annotations

import sys
from pathlib import Path

# Queries: short ones (expanded with [MASK]), one longer than the query length (cut), one with
# punctuation (a query keeps it); documents: punctuation and a character the tiny vocabulary
# lacks ("#": [UNK], skiplisted), one longer than the document length, several lengths in a batch
QUERIES = ["paris is a city", "what is the cat on ?", "dog",
           "the music of the film and the game played by the team at school , with water light"]
DOCUMENTS = ["paris is a city", "the cat , sat on the mat !!", "dog # house .",
             "music film game play team school water light word name city world movie love "
             "happy sad river house man people state life day year",
             "london"]
# case -> (ColBERT's arguments, Dense layers (in, out, bias[, use_residual]) after the 32-wide
# encoder)
CASES = {
    "plain": (dict(query_length=12, document_length=20), ((32, 16, False),)),
    # expansion tokens attended to, no document prefix, two Dense layers with biases
    "attend": (dict(query_length=10, document_length=16, attend_to_expansion_tokens=True,
                    document_prefix=""), ((32, 24, True), (24, 8, True))),
    # no query expansion: a query is its own tokens, like a document without the skiplist
    "no-expansion": (dict(query_length=9, document_length=24, do_query_expansion=False),
                     ((32, 16, False),)),
    # residual Dense layers: projected where the widths differ, the input itself where equal
    "residual": (dict(query_length=12, document_length=20),
                 ((32, 16, True, True), (16, 16, False, True))),
}


def main(out: Path) -> None:
    import numpy as np
    import torch
    from pylate import models, rank
    from sentence_transformers.models import Transformer

    from tests.conftest import make_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    checkpoint = make_checkpoint(out / "encoder", "feature-extraction")
    for case, (options, layers) in CASES.items():
        torch.manual_seed(len(case))
        dense = []
        for i, o, bias, *residual in layers:
            layer = models.Dense(i, o, bias=bias, use_residual=bool(residual and residual[0]))
            with torch.no_grad():   # biases away from 0, so a runtime that drops them fails
                if bias:
                    layer.linear.bias.normal_(0, 0.3)
            dense.append(layer)
        model = models.ColBERT(modules=[Transformer(str(checkpoint)), *dense], device="cpu",
                               **options)
        model.save(str(out / case))
        model = models.ColBERT(str(out / case), device="cpu")   # as a user loads the folder
        q = model.encode(QUERIES, is_query=True, batch_size=3)
        d = model.encode(DOCUMENTS, is_query=False, batch_size=2)
        ranked = rank.rerank(documents_ids=[list(range(len(DOCUMENTS)))] * len(QUERIES),
                             queries_embeddings=q, documents_embeddings=[d] * len(QUERIES))
        scores = np.zeros((len(QUERIES), len(DOCUMENTS)), np.float32)
        for row, results in enumerate(ranked):
            for r in results:
                scores[row, r["id"]] = r["score"]
        np.savez(out / f"{case}.npz", scores=scores, **{f"q{i}": x for i, x in enumerate(q)},
                 **{f"d{i}": x for i, x in enumerate(d)})


if __name__ == "__main__":
    main(Path(sys.argv[1]))
