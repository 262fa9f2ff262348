"""feature-extraction: sentence vectors (or transformers' token-level features) on onnxruntime.

An export of a sentence-transformers folder computes what `SentenceTransformer(folder).encode`
does after the encoder — its Pooling (any mode, prompt tokens left out where the folder says),
Dense layers, Normalize — truncating where it does (max_seq_length) and putting its prompts
before the texts (`prompt_name`, `prompt`, its default prompt). The stack is the manifest's
record (runtime/core/sentence_transformers.py), or a folder made elsewhere's own modules.json;
any other export behaves as a one-module stack: mean pooling.

pooling: the folder's (else "mean"); any of sentence-transformers' modes, several joined by
"+" (concatenated), or "none" — transformers' FeatureExtractionPipeline output, a [1][T][H]
nested list per text. normalize: unit-length vectors; by default as the folder chose (a
Normalize module last), else True; False leaves a folder's final Normalize out. Token vectors
(pooling "none") are left as they are, and normalizing them is refused. return_tensors=True
gives numpy arrays instead of lists. Texts longer than the model are truncated with a warning,
or with long_inputs="chunk" embedded whole as windows (chunks.py).
dimensions=k: each vector's first k values, renormalized when normalize
(sentence-transformers' `encode(truncate_dim=k, normalize_embeddings=...)`); a model whose
folder declares `matryoshka_dimensions` takes only those sizes (and its full width).
`embedding_ranges(k)`: the per-dimension ranges int8/uint8 quantization reads, calibrated at
export on the export's default vectors of width k (export/calibrate.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from ..errors import ArtifactError, InputError
from ..postprocess import l2_normalize, similarity
from ..sentence_transformers import matryoshka_dimensions, read_folder
from ..tensors import BYTES, FP32, HIDDEN, N, TaskTensors, Tensor, texts, token_width
from . import chunks
from .base import Work
from .folder import ExportFolder
from .inputs import Inputs
from .sentence_folder import SentenceFolderPipeline
from .windows import Windows


def _to_tensors(results: list) -> dict[str, np.ndarray]:
    return {"embedding": np.asarray(results, dtype=np.float32)}


class FeatureExtractionPipeline(SentenceFolderPipeline):
    """`stack`: the modules after the encoder; `dimension`: the width of the vectors a call
    with the defaults gives (a Dense layer or concatenated poolings change it)."""

    task = "feature-extraction"
    # pooling "none" (a [T, H] matrix per text) is kept off /v2 by the record: rows stay even
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),), (Tensor("embedding", FP32, (-1, HIDDEN)),),
                          texts, _to_tensors)

    def __init__(self, folder: ExportFolder, session, **kwargs):
        super().__init__(folder, session, **kwargs)   # reads the folder's stack first
        try:
            self.dimension = self.stack.width(token_width(self), _modes(self.defaults["pooling"]))
        except ValueError as e:
            raise ArtifactError(f"{folder.path}'s sentence-transformers modules do not fit its "
                                f"encoder: {e}", "export the model again from a folder "
                                "sentence-transformers loads") from None
        self._specials = _special_ids(self.tokenizer)
        record = folder.manifest.embeddings
        # the sizes the model was trained to be cut to (a folder made elsewhere: its own files)
        self.matryoshka_dimensions: tuple[int, ...] = (
            tuple(record.get("matryoshka_dimensions", ())) if folder.foreign is None
            else matryoshka_dimensions(folder.path))
        self._ranges = record.get("ranges", {})
        self._range_arrays: dict[int, np.ndarray] = {}   # parsed once per width, not per request

    def embedding_ranges(self, width: int) -> np.ndarray | None:
        """The (2, width) per-dimension minimum and maximum of this export's default vectors
        cut to `width`, calibrated at export on real text; None where none were."""
        if width in self._range_arrays:
            return self._range_arrays[width]
        ranges = self._ranges.get(str(width))
        if ranges is None:
            return None
        try:   # float32, as calibrated (JSON holds each float32 exactly)
            ranges = np.asarray(ranges, dtype=np.float32)
        except (TypeError, ValueError):
            ranges = None
        if ranges is None or ranges.shape != (2, width):
            raise ArtifactError(f"{self.folder.path}'s manifest records embedding ranges for "
                                f"{width} dimensions that are not two rows of {width} numbers",
                                "export the model again")
        self._range_arrays[width] = ranges
        return ranges

    @property
    def similarity_fn_name(self) -> str:
        """How the model's vectors are compared: cosine, dot, euclidean or manhattan."""
        return self.stack.similarity_fn_name

    def similarity(self, a, b) -> np.ndarray:
        """sentence-transformers' `model.similarity(a, b)`: (N, M) scores by the model's own
        function (higher is more similar)."""
        return similarity(np.asarray(a, np.float32), np.asarray(b, np.float32),
                          self.similarity_fn_name)

    @classmethod
    def folder_defaults(cls, path: Path) -> dict:
        """A sentence-transformers folder's own pooling and normalize (its modules.json);
        {} for any other folder."""
        stack = read_folder(path)
        return {} if stack is None else stack.defaults()

    def check_parameters(self, **params) -> None:
        super().check_parameters(**params)
        pooling = params.get("pooling")
        if pooling not in (None, "none"):
            try:
                self.stack.width(token_width(self), _modes(pooling))
            except ValueError as e:
                raise InputError(f"pooling={pooling!r} does not fit this model: {e}",
                                 f"leave pooling out (the model's own: "
                                 f"{self.defaults['pooling']!r})", parameter="pooling") from None
        k = params.get("dimensions")
        allowed = self.matryoshka_dimensions
        if k is not None and allowed and k not in allowed and k != self.dimension:
            raise InputError(f"dimensions={k}: this model was trained for "
                             f"{', '.join(map(str, allowed))} dimensions (its "
                             "matryoshka_dimensions)", f"pass dimensions={allowed[-1]}, one of "
                             "them, or leave dimensions out", parameter="dimensions")

    def complete(self, params: Mapping) -> dict:
        # the default normalize is for pooled vectors: token vectors stay as they are
        if params.get("pooling") == "none" and "normalize" not in params:
            params = {**params, "normalize": False}
        return super().complete(params)

    def prompt_length(self, prompt: str) -> int:
        """The tokens pooling leaves out for `prompt` (transformer.py `_get_prompt_length`):
        the prompt encoded alone, less a special token the tokenizer ends it with."""
        ids = self.backend(self.max_length).encode(prompt).ids
        return len(ids) - 1 if ids and ids[-1] in self._specials else len(ids)

    def estimate(self, inputs: Inputs, **params) -> Work:
        if params["long_inputs"] != "chunk":
            return super().estimate(inputs, **params)
        windows = self._windows(self.prompted(inputs, params["prompt_name"], params["prompt"]))
        return Work(sum(len(e.ids) for e in windows.encodings),
                    windows=chunks.window_counts(windows))

    def predict(self, read: Inputs, pooling, normalize, dimensions, prompt_name, prompt,
                truncation_direction, long_inputs, return_tensors, batch_size):
        if pooling == "none" and normalize:
            raise InputError("normalize needs a pooled vector", "pass pooling='mean' or 'cls'")
        if pooling == "none" and dimensions is not None:
            raise InputError("dimensions needs a pooled vector", "pass pooling='mean' or "
                             "leave dimensions out", parameter="dimensions")
        chunked = long_inputs == "chunk"
        if chunked and pooling == "none":
            raise InputError("long_inputs='chunk' pools each window into one vector, and "
                             "pooling 'none' keeps token vectors",
                             "pass a pooling, or long_inputs='truncate'", parameter="long_inputs")
        prompt = self.prompt_text(prompt_name, prompt)
        texts = self.prompted(read, None, prompt)
        windows = self._windows(texts) if chunked else None
        encs = windows.encodings if chunked else self.encode(
            texts, direction=truncation_direction.lower())
        modes = _modes(pooling)
        # pooling leaves the prompt's tokens out where the folder says (include_prompt false);
        # only a text's first window holds them
        cut = (self.prompt_length(prompt) if prompt and pooling != "none"
               and not self.stack.pooling.include_prompt else 0)

        def post(batch, out):
            hidden = out["last_hidden_state"]                              # (B, T, H)
            if pooling == "none":
                return [hidden[row:row + 1, :n] for row, n in enumerate(batch.lengths)]
            if not chunked:
                return self.stack.embed(hidden, batch.attention_mask, modes, normalize, cut)
            pooled = self.stack.embed(hidden, batch.attention_mask, modes, False, 0)
            if cut:
                first = windows.part[np.asarray(batch.index)] == 0
                cut_off = self.stack.embed(hidden, batch.attention_mask, modes, False, cut)
                pooled = np.where(first[:, None], cut_off, pooled)
            return pooled

        results = self.infer(encs, post, batch_size)
        if chunked:
            results = chunks.combine(windows, results, normalize)
        if dimensions is not None and results:
            # cut, then unit length again (a cut unit vector is shorter than 1)
            cut_vectors = np.stack([np.asarray(r) for r in results])[:, :dimensions]
            results = list(l2_normalize(cut_vectors) if normalize else cut_vectors)
        if not return_tensors:
            results = [r.tolist() for r in results]
        elif pooling != "none":
            results = np.stack([np.asarray(r) for r in results])
        return self.unwrap(results, read)

    def _windows(self, texts: list[str]) -> Windows:
        return self.encode_windows(texts, self.max_length, chunks.overlap(self.max_length))


def _modes(pooling: str) -> tuple[str, ...]:
    return tuple(pooling.split("+"))


def _special_ids(tokenizer) -> set[int]:
    """transformers' all_special_ids: the named special tokens and every special added one."""
    named = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
             tokenizer.mask_token_id, tokenizer.unk_token_id,
             tokenizer.token_to_id(tokenizer.bos_token) if tokenizer.bos_token else None,
             tokenizer.token_to_id(tokenizer.eos_token) if tokenizer.eos_token else None}
    added = {i for i, t in tokenizer.backend.get_added_tokens_decoder().items() if t.special}
    return {i for i in named | added if i is not None}
