"""fill-mask: transformers 4.57 FillMaskPipeline semantics on onnxruntime.

Arguments top_k (5) and targets (str or list; a target outside the vocabulary is replaced by
its first word piece, with a warning); results {score, token, token_str, sequence}; several
masks in one text give one list per mask (other masks kept visible in `sequence`).
Deliberate differences: a list of one text gives a list of one result (transformers unwraps
it); texts longer than the model are truncated with a warning instead of failing.
"""
from __future__ import annotations

import logging

import numpy as np

from ..errors import InputError
from ..postprocess import mask_probabilities, topk
from ..tensors import BYTES, FP32, INT64, NK, N, TaskTensors, Tensor
from .base import Pipeline, Work
from .inputs import Inputs, check_text

log = logging.getLogger("bertonnx")


def _one_mask_texts(tensors: dict, pipe) -> list[str]:
    """/v2: the texts, each with at most one mask: [N, top_k] holds one mask's proposals per
    row (a text without one is the pipeline's own error)."""
    mask = pipe.tokenizer.mask_token
    for i, text in enumerate(tensors["text"]):
        if text.count(mask) > 1:
            raise InputError(f"text #{i} has {text.count(mask)} {mask} tokens; over /v2 each "
                             "text fills one mask ([N, top_k] outputs)",
                             "send one text per mask, or POST /predict for several", index=i)
    return tensors["text"]


def _proposals(results: list) -> dict[str, np.ndarray]:
    """/v2: each text's top_k proposals, [N, top_k] per field."""
    for i, r in enumerate(results):
        if r and isinstance(r[0], list):
            raise InputError(f"text #{i} holds several mask tokens after tokenization",
                             "send one mask per text", index=i)
    return {"token_str": np.array([[p["token_str"] for p in r] for r in results], np.object_),
            "score": np.array([[p["score"] for p in r] for r in results], np.float32),
            "token": np.array([[p["token"] for p in r] for r in results], np.int64),
            "sequence": np.array([[p["sequence"] for p in r] for r in results], np.object_)}

class FillMaskPipeline(Pipeline):
    task = "fill-mask"
    tensors = TaskTensors(task, (Tensor("text", BYTES, N),),
                          (Tensor("token_str", BYTES, NK), Tensor("score", FP32, NK),
                           Tensor("token", INT64, NK), Tensor("sequence", BYTES, NK)),
                          _one_mask_texts, _proposals)

    def target_ids(self, targets) -> np.ndarray:
        if isinstance(targets, str):
            targets = [targets]
        if not isinstance(targets, (list, tuple)) or not all(isinstance(t, str) for t in targets):
            raise InputError(f"targets must be a str or a list of str, got {targets!r:.60}",
                             "pass targets=['word', ...]")
        for t in targets:
            if t.strip():  # blank targets are dropped below with a warning
                check_text(t, f"target {t!r}")
        ids = []
        for t in targets:
            i = self.tokenizer.token_to_id(t)
            if i is None:
                pieces = self.tokenizer.backend.encode(t, add_special_tokens=False).ids
                if not pieces:
                    log.warning("target %r has no token in the vocabulary; ignored", t)
                    continue
                i = pieces[0]
                log.warning("target %r is not in the vocabulary; using %r", t,
                            self.tokenizer.id_to_token(i))
            ids.append(i)
        if not ids:
            raise InputError("none of the targets maps to a vocabulary token",
                             "pass targets that are words of the model's vocabulary")
        return np.array(sorted(set(ids)), dtype=np.int64)

    def _texts(self, read: Inputs) -> list[str]:
        """The texts, each known to hold the mask token (InputError naming the one without)."""
        if self.tokenizer.mask_token_id is None:
            raise InputError("this tokenizer defines no mask token", "use a fill-mask export")
        texts = list(read.records)
        mask_tok = self.tokenizer.mask_token
        for i, t in enumerate(texts):
            if mask_tok not in t:
                where = "the text" if read.single else f"text #{i}"
                raise InputError(f"no mask token {mask_tok} in {where}: {t[:60]!r}",
                                 f"put {mask_tok} where the word to predict goes", index=i)
        return texts

    def _lost_mask(self, i: int, enc) -> InputError:
        """The error for text i, whose encoding `enc` holds no mask token."""
        if enc.overflowing:
            return InputError(f"the mask token of text #{i} lies beyond the model's "
                              f"{self.max_length} tokens and was truncated away",
                              "shorten the text or move the mask nearer its start", index=i)
        return InputError(f"text #{i} has no {self.tokenizer.mask_token} token after "
                          "tokenization", f"write the mask exactly as {self.tokenizer.mask_token}",
                          index=i)

    def estimate(self, inputs: Inputs, top_k, targets, **_) -> Work:
        """Tokens as the base counts them; answers = proposals, top_k per mask kept."""
        encs = self.encode(self._texts(inputs), warn=False)
        for i, e in enumerate(encs):
            if self.tokenizer.mask_token_id not in e.ids:
                raise self._lost_mask(i, e)
        k = min(top_k, self.tokenizer.vocab_size if targets is None else
                len([targets] if isinstance(targets, str) else targets))
        masks = sum(e.ids.count(self.tokenizer.mask_token_id) for e in encs)
        return Work(sum(len(e.ids) for e in encs), masks * k)

    def predict(self, read: Inputs, top_k, targets, batch_size):
        mask_id = self.tokenizer.mask_token_id
        texts = self._texts(read)
        tids = None if targets is None else self.target_ids(targets)
        k = top_k if tids is None else min(top_k, len(tids))
        encs = self.encode(texts, warn=False)  # warned below, once every mask is known kept

        def post(batch, out):
            rows, cols = np.nonzero(batch.input_ids == mask_id)          # (M,), (M,)
            for r in np.setdiff1d(np.arange(len(batch.index)), rows):
                i = int(batch.index[r])
                raise self._lost_mask(i, encs[i])
            probs = mask_probabilities(out["logits"][rows, cols], tids)  # (M, V or targets)
            vals, idx = topk(probs, k)
            preds = idx if tids is None else tids[idx]                    # (M, k) token ids
            return self._emit(batch, rows, cols, vals, preds)

        results = self.infer(encs, post, batch_size)
        self.warn_truncated(encs)
        return self.unwrap(results, read)

    def _emit(self, batch, rows, cols, vals, preds) -> list:
        """Each row's result: sequences decoded in one batch call, one dict per proposal, one
        list per mask (a text with one mask gives its list alone)."""
        M, k = preds.shape
        n_masks = np.bincount(rows, minlength=len(batch.index))
        seqs = []
        for m in range(M):
            r = rows[m]
            base = batch.input_ids[r, :batch.lengths[r]]
            filled = np.repeat(base[None], k, axis=0)
            filled[:, cols[m]] = preds[m]
            seqs.extend(filled)
        # transformers skips special tokens only with one mask, so other masks stay visible
        single_mask = np.repeat(n_masks[rows] == 1, k)
        texts = [None] * len(seqs)
        for flag in (True, False):
            sel = np.flatnonzero(single_mask == flag)
            if len(sel):
                for j, t in zip(sel, self.decode_batch([seqs[j] for j in sel], flag)):
                    texts[j] = t
        token_strs = self.decode_batch([[int(p)] for p in preds.reshape(-1)], False)
        per_row: dict[int, list] = {}
        for m in range(M):
            props = [{"score": float(vals[m, j]), "token": int(preds[m, j]),
                      "token_str": token_strs[m * k + j], "sequence": texts[m * k + j]}
                     for j in range(k)]
            per_row.setdefault(int(rows[m]), []).append(props)
        return [lists[0] if len(lists) == 1 else lists
                for _, lists in sorted(per_row.items())]
