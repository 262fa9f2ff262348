"""feature-extraction: sentence vectors (or transformers' token-level features) on onnxruntime.

pooling "mean" (default; the sentence-transformers recipe all-MiniLM-L6-v2 was trained with),
"cls", or "none" — transformers' FeatureExtractionPipeline output, a [1][T][H] nested list per
text. normalize (default True) scales each pooled vector to unit length (cosine = dot
product); token vectors (pooling "none") are left as they are unless it is asked for, which is
refused. An export of a sentence-transformers folder defaults to the folder's own pooling and
normalize (`folder_defaults`, read from its modules.json at export). return_tensors=True gives
numpy arrays instead of lists. Texts longer than the model are truncated with a warning.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ArtifactError, InputError
from ..postprocess import l2_normalize, pool
from ..tensors import BYTES, FP32, HIDDEN, N, TaskTensors, Tensor, texts
from .base import Pipeline
from .inputs import Inputs

log = logging.getLogger("bertonnx")
# sentence-transformers modules the export carries: the encoder (the graph), the pooling and
# normalisation (this pipeline); any other (Dense, ...) would change the folder's vectors
_ST_CARRIED = {"Transformer", "Pooling", "Normalize"}


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"embedding": np.asarray(results, dtype=np.float32)}

class FeatureExtractionPipeline(Pipeline):
    task = "feature-extraction"
    # pooling "none" (a [T, H] matrix per text) is kept off /v2 by the record: rows stay even
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("embedding", FP32, (-1, HIDDEN)),),
                          texts, _to_tensors)

    def complete(self, params: Mapping) -> dict:
        # the default normalize is for pooled vectors: token vectors stay as they are
        if params.get("pooling") == "none" and "normalize" not in params:
            params = {**params, "normalize": False}
        return super().complete(params)

    @classmethod
    def folder_defaults(cls, path: Path) -> dict:
        """A sentence-transformers folder's own choices, from its modules.json: its Pooling
        module's mode (when mean or cls) and whether a Normalize module ends it. What the
        export cannot reproduce (another pooling mode, a Dense module) is warned about."""
        listed = Path(path) / "modules.json"
        if not listed.is_file():
            return {}
        try:
            modules = json.loads(listed.read_text(encoding="utf-8"))
            kinds = {str(m["type"]).rsplit(".", 1)[-1]: str(m.get("path", "")) for m in modules}
        except (ValueError, TypeError, KeyError) as e:
            raise ArtifactError(f"{listed} is not a sentence-transformers module list ({e})",
                                "restore the file, or remove it") from None
        chosen = {"normalize": "Normalize" in kinds}
        other = sorted(set(kinds) - _ST_CARRIED)
        if other:
            log.warning("%s holds sentence-transformers module(s) %s, which the export does "
                        "not carry: its vectors will differ from sentence-transformers'",
                        path, ", ".join(other))
        if "Pooling" in kinds:
            modes = _pooling_modes(Path(path) / kinds["Pooling"] / "config.json")
            if modes in (["mean"], ["cls"]):
                chosen["pooling"] = modes[0]
            else:
                log.warning("%s pools by %s (its sentence-transformers Pooling module), which "
                            "bertonnx does not compute: its vectors default to mean pooling",
                            path, " + ".join(modes) or "nothing")
        return chosen

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


def _pooling_modes(config: Path) -> list[str]:
    """The modes a sentence-transformers Pooling config turns on: the classic
    `pooling_mode_<mode>_token(s)` booleans, or sentence-transformers 5's "pooling_mode"."""
    if not config.is_file():
        return []
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    mode = data.get("pooling_mode")
    if isinstance(mode, (str, list)):
        return [mode] if isinstance(mode, str) else [str(m) for m in mode]
    return [k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
            for k, v in data.items() if k.startswith("pooling_mode_") and v is True]
