"""Tiny random PyLate ColBERT folders and PyLate's own outputs on them, for the multi-vector tests.

Run by the tests in the references' environment (tests/references.py), from the repository root:

    REFERENCES_PYTHON -m tests.colbert_reference OUT

For each case in CASES it saves `OUT/<case>/` with pylate (models.ColBERT(...).save: a
sentence-transformers folder with pylate's Dense module and its config_sentence_transformers.json),
and `OUT/stanford/` as colbert-ai saves a checkpoint (STANFORD: a transformers folder naming
HF_ColBERT, the projection `linear.weight` among the encoder's weights, artifact.metadata), which
pylate loads itself; for each, `OUT/<case>.npz`: ColBERT.encode of QUERIES (is_query=True) and DOCUMENTS (is_query=False) as
q0.., d0.., and pylate's colbert_scores of each query against every document, one pair at a time
(scores, an (len(QUERIES), len(DOCUMENTS)) array in document order), and the documents
pooled as encode(pool_factor=, protected_tokens=) pools them (POOLS). torch, pylate: imported in main() only,
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
# (pool_factor, protected_tokens) of ColBERT.encode's token pooling, each case's documents
POOLS = ((2, 1), (3, 0))
STANFORD = "stanford"
# colbert-ai's artifact.metadata keys pylate reads (the rest of the file it ignores)
STANFORD_METADATA = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]",
                     "query_maxlen": 10, "doc_maxlen": 18, "attend_to_mask_tokens": False,
                     "dim": 16, "similarity": "cosine", "mask_punctuation": True}


def stanford_folder(out: Path, checkpoint: Path) -> Path:
    """A Stanford ColBERT checkpoint as colbert-ai's HF_ColBERT saves one: BertModel's weights
    under `bert.`, the 32 -> 16 projection `linear.weight`, config.json naming HF_ColBERT,
    artifact.metadata; the tokenizer files beside."""
    import json

    import torch
    import transformers
    from safetensors.torch import save_file

    encoder = transformers.BertModel.from_pretrained(checkpoint)
    state = {f"bert.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    torch.manual_seed(7)
    state["linear.weight"] = torch.randn(16, encoder.config.hidden_size) * 0.3
    folder = out / STANFORD
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"))
    config = {**encoder.config.to_dict(), "architectures": ["HF_ColBERT"]}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "artifact.metadata").write_text(json.dumps(STANFORD_METADATA))
    for f in checkpoint.iterdir():
        if f.name.startswith(("vocab", "tokenizer", "special_tokens")):
            (folder / f.name).write_bytes(f.read_bytes())
    return folder


def main(out: Path) -> None:
    import numpy as np
    import torch
    from pylate import models
    from pylate import scores as scores_
    from sentence_transformers.models import Transformer

    from tests.conftest import VOCAB, make_checkpoint

    out.mkdir(parents=True, exist_ok=True)
    # [unused0] and [unused1] in the vocabulary: a Stanford checkpoint's prefix tokens
    checkpoint = make_checkpoint(out / "encoder", "feature-extraction", vocab=len(VOCAB) + 2)
    for case in (*CASES, STANFORD):
        if case == STANFORD:
            stanford_folder(out, checkpoint)
        else:
            options, layers = CASES[case]
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
        # each pair alone: pylate.rank.rerank pads a call's documents with zero vectors and
        # scores them unmasked, so there a query token whose every real match is negative
        # scores 0 (the padding's) instead of its best match, and a score depends on the other
        # documents of the call; colbert_scores on one unpadded pair is MaxSim itself
        scores = np.array([[float(scores_.colbert_scores(torch.from_numpy(x)[None],
                                                         torch.from_numpy(y)[None])[0, 0])
                            for y in d] for x in q], np.float32)
        # documents pooled (encode's pool_factor, protected_tokens): p{factor}-{protected}-{i}
        pooled = {f"p{f}-{k}-{i}": x for f, k in POOLS
                  for i, x in enumerate(model.encode(DOCUMENTS, is_query=False, batch_size=2,
                                                     pool_factor=f, protected_tokens=k))}
        np.savez(out / f"{case}.npz", scores=scores, **{f"q{i}": x for i, x in enumerate(q)},
                 **{f"d{i}": x for i, x in enumerate(d)}, **pooled)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
