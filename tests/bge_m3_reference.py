"""A tiny random BGE-M3 folder and FlagEmbedding's own outputs on it, for the bge-m3 tests.

Run by the tests in the references' environment (tests/references.py), from the repository root:

    REFERENCES_PYTHON -m tests.bge_m3_reference OUT

It saves `OUT/model/` as FlagEmbedding's M3 training saves a folder (runner.py / modeling.py
`save`): an XLMRobertaModel with its tokenizer, and `colbert_linear.pt` (Linear(H, H)) and
`sparse_linear.pt` (Linear(H, 1)) as torch.save'd state dicts; then `OUT/outputs.npz`:
BGEM3FlagModel(OUT/model, use_fp16=False).encode(TEXTS, return_dense=True, return_sparse=True,
return_colbert_vecs=True, batch_size=BATCH_SIZE) — dense (len(TEXTS), H), colbert<i>
(tokens - 1, H), sparse_ids<i> / sparse_values<i> (each lexical_weights dict, ids ascending), and
its compute_lexical_matching_score and colbert_score of every pair of texts (lexical_scores,
colbert_scores), and compute_score of PAIRS under each of SCORE_WEIGHTS ("compute_score KEY").
torch and FlagEmbedding are imported in main() only, so the tests read TEXTS from the suite's
environment.
"""
from __future__ import annotations

import sys
from pathlib import Path

# Several lengths in one batch (rows padded), a repeated word (the sparse weight is the max over
# its tokens), characters the tiny vocabulary lacks (<unk>: dropped from the sparse weights), and
# one text past MAX_LENGTH (cut)
TEXTS = ["Paris is the capital of France.", "dog", "the dog sat on the mat, the dog sat",
         "北京欢迎你 ☃ 🙂 ¿", "The quick brown fox jumps over the lazy dog. " * 6, "Hello, world!"]
BATCH_SIZE = 4
MAX_LENGTH = 40
# compute_score's (query, passage) pairs, and its weights (None: its default 1, 1, 1)
PAIRS = [(TEXTS[0], TEXTS[4]), (TEXTS[1], TEXTS[2]), (TEXTS[2], TEXTS[1]), (TEXTS[5], TEXTS[3])]
SCORE_WEIGHTS = (None, [0.4, 0.2, 0.4])
SCORE_KEYS = ("dense", "sparse", "colbert", "sparse+dense", "colbert+sparse+dense")


def main(out: Path) -> None:
    import numpy as np
    import torch
    from FlagEmbedding import BGEM3FlagModel

    from bertonnx.bench.references import flagembedding_arrays
    from tests.conftest import make_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    folder = make_checkpoint(out / "model", "feature-extraction", model_type="xlm-roberta",
                             seed=3)
    hidden = 32
    torch.manual_seed(3)
    colbert, sparse = torch.nn.Linear(hidden, hidden), torch.nn.Linear(hidden, 1)
    with torch.no_grad():   # biases away from 0, so a runtime that drops them fails
        colbert.bias.normal_(0, 0.3)
        sparse.bias.fill_(0.05)
    torch.save(colbert.state_dict(), folder / "colbert_linear.pt")
    torch.save(sparse.state_dict(), folder / "sparse_linear.pt")
    model = BGEM3FlagModel(str(folder), use_fp16=False, devices="cpu")
    got = model.encode(TEXTS, batch_size=BATCH_SIZE, max_length=MAX_LENGTH, return_dense=True,
                       return_sparse=True, return_colbert_vecs=True)
    arrays = flagembedding_arrays(got)
    # its score helpers on every pair of the texts (lexical: the dicts as encode gave them)
    arrays["lexical_scores"] = np.asarray(model.compute_lexical_matching_score(
        got["lexical_weights"], got["lexical_weights"]), np.float64)
    arrays["colbert_scores"] = np.array([[float(model.colbert_score(q, p))
                                          for p in got["colbert_vecs"]]
                                         for q in got["colbert_vecs"]], np.float32)
    # compute_score, each pair alone (batch_size 1: its batches pad passages with zero colbert
    # vectors), with the default weights and with others: SCORE_KEYS, as (weights, pair) arrays
    scores = [[model.compute_score(pair, batch_size=1, max_query_length=MAX_LENGTH,
                                   max_passage_length=MAX_LENGTH,
                                   weights_for_different_modes=w) for pair in PAIRS]
              for w in SCORE_WEIGHTS]
    for key in SCORE_KEYS:
        arrays[f"compute_score {key}"] = np.array([[s[key] for s in row] for row in scores])
    np.savez(out / "outputs.npz", **arrays)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
