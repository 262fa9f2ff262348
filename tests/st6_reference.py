"""Tiny random sentence-transformers 6 MultiVectorEncoder folders and its own outputs on them, for
the multi-vector tests.

Run by the tests in the references-st6 environment (tests/references.py `ST6`), from the
repository root:

    ST6_PYTHON -m tests.st6_reference OUT

For each case in CASES it saves `OUT/<case>/` with sentence-transformers 6.2
(MultiVectorEncoder(modules=...).save; FROM_PYLATE: a PyLate folder loaded and saved again)
and `OUT/<case>.npz`: encode_query of QUERIES as q0.. and encode_document of DOCUMENTS as d0..
(tests/colbert_reference.py's texts), and
MultiVectorEncoder.similarity's MaxSim scores of each query against every document (scores).
torch and sentence_transformers: imported in main() only, so the tests can read the cases from
the suite's environment.
"""
from __future__ import annotations

import string
import sys
from pathlib import Path

from tests.colbert_reference import DOCUMENTS, QUERIES  # noqa: F401 — the tests' texts

# case -> (Transformer's multi-vector arguments, Dense layers (in, out, bias), MultiVectorMask's
# arguments or None for no mask, prompts)
CASES = {
    # classic ColBERT: "fixed" expansion (every query 12 tokens, prompt included) with a token
    # of its own, text prompts, the punctuation skiplist on documents
    "fixed": (dict(document_length=20,
                   query_expansion={"strategy": "fixed", "length": 12, "token": "the"}),
              ((32, 16, False),), dict(skiplist_words=list(string.punctuation)),
              {"query": "what : ", "document": "the : "}),
    # "min": queries expanded to 8 tokens (attended to), cut at 14; documents at the model's
    # maximum; two Dense layers with biases; the skiplist on queries too, "#" absent from the
    # vocabulary (so [UNK] is kept: MultiVectorMask drops the word, PyLate would skip [UNK]);
    # documents keep only KEEP's tokens (keep_only_token_ids)
    "min": (dict(query_length=14,
                 query_expansion={"strategy": "min", "length": 8, "attend": True}),
            ((32, 24, True), (24, 8, True)),
            dict(skiplist_words=[",", "!", "#"], skiplist_tasks=["query", "document"]), {}),
    # no expansion and no MultiVectorMask: a query is its own tokens cut at 9, nothing skipped
    "plain": (dict(query_length=9, document_length=24), ((32, 16, False),), None,
              {"query": "what "}),
}
# a PyLate folder (tests/colbert_folder.py's, prefixes [unused0] / [unused1]) loaded by
# MultiVectorEncoder and saved again: its prefixes become prompts, registered as special tokens
FROM_PYLATE = "from-pylate"
# the tokens a "min" document keeps (their ids in the tiny vocabulary, found when made)
KEEP = ("[CLS]", "[UNK]", "city", "cat", "dog", "house", "music", "film", "london")


def main(out: Path) -> None:
    import numpy as np
    import torch
    from sentence_transformers import MultiVectorEncoder

    from tests.colbert_folder import write_colbert_files
    from tests.conftest import VOCAB, make_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    checkpoint = make_checkpoint(out / "encoder", "feature-extraction")
    pylate = write_colbert_files(make_checkpoint(out / "pylate", "feature-extraction",
                                                 vocab=len(VOCAB) + 2), 32, seed=3)
    MultiVectorEncoder(str(pylate), device="cpu").save(str(out / FROM_PYLATE))
    for case in (*CASES, FROM_PYLATE):
        if case != FROM_PYLATE:
            _save(case, checkpoint, out / case)
        model = MultiVectorEncoder(str(out / case), device="cpu")   # as a user loads the folder
        q = model.encode_query(QUERIES, batch_size=3, convert_to_numpy=True)
        d = model.encode_document(DOCUMENTS, batch_size=2, convert_to_numpy=True)
        scores = model.similarity([torch.from_numpy(x) for x in q],
                                  [torch.from_numpy(x) for x in d]).numpy()
        np.savez(out / f"{case}.npz", scores=scores, **{f"q{i}": x for i, x in enumerate(q)},
                 **{f"d{i}": x for i, x in enumerate(d)})


def _save(case: str, checkpoint: Path, folder: Path) -> None:
    """CASES[case] built on `checkpoint` and saved to `folder` by sentence-transformers."""
    import torch
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    options, layers, mask, prompts = CASES[case]
    torch.manual_seed(len(case))
    modules = [Transformer(str(checkpoint), **options)]
    for i, o, bias in layers:
        layer = Dense(i, o, bias=bias, activation_function=torch.nn.Identity(),
                      module_input_name="token_embeddings")
        with torch.no_grad():   # biases away from 0, so a runtime that drops them fails
            if bias:
                layer.linear.bias.normal_(0, 0.3)
        modules.append(layer)
    if mask is not None:
        if case == "min":
            mask = {**mask, "keep_only_token_ids":
                    modules[0].tokenizer.convert_tokens_to_ids(list(KEEP))}
        modules.append(MultiVectorMask(**mask))
    modules.append(Normalize(module_input_name="token_embeddings"))
    MultiVectorEncoder(modules=modules, device="cpu", prompts=prompts).save(str(folder))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
