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
from ..postprocess import l2_normalize, pool
from ..tensors import BYTES, FP32, HIDDEN, N, TaskTensors, Tensor, texts
from .base import Pipeline
from .inputs import Inputs


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"embedding": np.asarray(results, dtype=np.float32)}

class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"
    # pooling "none" (a [T, H] matrix per text) is kept off /v2 by the record: rows stay even
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("embedding", FP32, (-1, HIDDEN)),),
                          texts, _to_tensors)

    def predict(self, read: Inputs, pooling, normalize, return_tensors, batch_size):
        if pooling == "none" and normalize:
            raise InputError("normalize needs a pooled vector", "pass pooling='mean' or 'cls'")
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
