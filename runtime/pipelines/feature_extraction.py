"""feature-extraction: sentence vectors (or transformers' token-level features) on onnxruntime.

pooling "mean" (default; the sentence-transformers recipe all-MiniLM-L6-v2 was trained with),
"cls", or "none" — transformers' FeatureExtractionPipeline output, a [1][T][H] nested list per
text. normalize=True scales each vector to unit length (cosine = dot product).
return_tensors=True gives numpy arrays instead of lists. Texts longer than the model are
truncated with a warning.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..postprocess import POOLINGS, l2_normalize, pool
from .base import Pipeline, as_text_list


class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"

    def __call__(self, inputs, pooling: str = "mean", normalize: bool = False,
                 return_tensors: bool = False, batch_size: int | None = None):
        if pooling not in POOLINGS:
            raise InputError(f"unknown pooling {pooling!r}", f"use one of {', '.join(POOLINGS)}")
        if pooling == "none" and normalize:
            raise InputError("normalize needs a pooled vector", "pass pooling='mean' or 'cls'")
        texts, single = as_text_list(inputs)
        encs = self.encode(texts)
        results: list = [None] * len(texts)
        for batch, out in self.run(encs, batch_size):
            hidden = out["last_hidden_state"]                              # (B, T, H)
            if pooling == "none":
                for row, i in enumerate(batch.index):
                    results[i] = hidden[row:row + 1, :batch.lengths[row]]   # (1, T, H)
                continue
            vecs = pool(hidden, batch.attention_mask, pooling)             # (B, H)
            if normalize:
                vecs = l2_normalize(vecs)
            for row, i in enumerate(batch.index):
                results[i] = vecs[row]
        if return_tensors:
            out = results if pooling == "none" else [np.asarray(r) for r in results]
            if pooling != "none" and not single:
                return np.stack(out)
            return out[0] if single else out
        lists = [r.tolist() for r in results]
        return lists[0] if single else lists
