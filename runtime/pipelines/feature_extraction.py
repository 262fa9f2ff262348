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
from .base import Pipeline
from .parameters import boolean, choice


class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"
    PARAMETERS = {**Pipeline.PARAMETERS, "pooling": choice(POOLINGS), "normalize": boolean(),
                  "return_tensors": boolean()}

    def __call__(self, inputs, pooling: str = "mean", normalize: bool = False,
                 return_tensors: bool = False, batch_size: int | None = None):
        self.check_parameters(pooling=pooling, normalize=normalize,
                              return_tensors=return_tensors, batch_size=batch_size)
        if pooling == "none" and normalize:
            raise InputError("normalize needs a pooled vector", "pass pooling='mean' or 'cls'")
        read = self.read_inputs(inputs)
        encs = self.encode(list(read.records))

        def post(batch, out):
            hidden = out["last_hidden_state"]                              # (B, T, H)
            if pooling == "none":
                return [hidden[row:row + 1, :n] for row, n in enumerate(batch.lengths)]
            vecs = pool(hidden, batch.attention_mask, pooling)             # (B, H)
            return l2_normalize(vecs) if normalize else vecs

        results = self.infer(encs, post, batch_size)
        if not return_tensors:
            results = [r.tolist() for r in results]
        elif pooling != "none":
            results = np.stack([np.asarray(r) for r in results])
        return self.unwrap(results, read)
