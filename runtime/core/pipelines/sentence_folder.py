"""What the pipelines of sentence-transformers' three model classes share: how the model's folder
reads text.

A SentenceTransformer (feature-extraction), a SparseEncoder (sparse-embedding) and a CrossEncoder
(text-ranking) put a prompt before each text — `prompt`, else the prompt `prompt_name` names,
else the folder's default prompt (base/model.py `_resolve_prompt`; a CrossEncoder prompts the
query of each pair) — truncate at the folder's max_seq_length, and lowercase first where the
folder says do_lower_case. The folder's settings are the export's manifest record
(runtime/core/sentence_transformers.py read them from the model folder at export), or a folder
made elsewhere's own files; any other export reads text plainly, with the prompt names every
model of the class has (a SentenceTransformer's and a SparseEncoder's "query" and "document",
both empty).
"""
from __future__ import annotations

from typing import Mapping

from tokenizers import normalizers

from ..contract import MANIFEST_NAME
from ..families import usable_positions
from ..sentence_modules import Pooling, SentenceStack, check_order
from ..sentence_transformers import MODEL_CLASSES, TOKEN_FEATURES, read_folder
from .base import Pipeline, Work
from .folder import ExportFolder
from .inputs import Inputs


class SentenceFolderPipeline(Pipeline):
    """A pipeline whose export may come from a sentence-transformers folder: `stack` holds
    what the folder says (and, for sentence vectors, its modules after the encoder)."""

    def __init__(self, folder: ExportFolder, session, **kwargs):
        # before the base checks the export's defaults: the rules read it (its prompt names)
        self.stack = read_stack(folder, self.task)
        super().__init__(folder, session, **kwargs)
        if self.stack.do_lower_case:
            _lowercase_first(self.tokenizer.backend)

    @property
    def prompts(self) -> Mapping[str, str]:
        """The model's prompts by name (config_sentence_transformers.json)."""
        return self.stack.prompts

    @property
    def max_length(self) -> int:
        """Where sentence-transformers truncates: the folder's max_seq_length, else the
        tokenizer's model_max_length; both capped by the model's positions."""
        if self.stack.max_seq_length is None:
            return self.folder.max_length
        limit = usable_positions(self.folder.config)
        return min(self.stack.max_seq_length, limit) if limit else self.stack.max_seq_length

    def prompt_text(self, prompt_name: str | None, prompt: str | None) -> str:
        """The text put before each input (base/model.py `_resolve_prompt`): `prompt`, else
        the named prompt, else the model's default prompt; "" for none."""
        if prompt is None:
            name = prompt_name if prompt_name is not None else self.stack.default_prompt_name
            prompt = self.prompts.get(name, "") if name is not None else ""
        return prompt

    def prompted(self, read: Inputs, prompt_name: str | None, prompt: str | None) -> list[str]:
        """Each text with the call's prompt before it."""
        prefix = self.prompt_text(prompt_name, prompt)
        return [prefix + t for t in read.records]

    def estimate(self, inputs: Inputs, **params) -> Work:
        texts = self.prompted(inputs, params["prompt_name"], params["prompt"])
        return Work(sum(len(e.ids) for e in self.encode(texts, warn=False)))


def read_stack(folder: ExportFolder, task: str) -> SentenceStack:
    """The export's recorded settings (a Dense module's weights vouched for by the manifest), a
    folder made elsewhere's own sentence-transformers files, or the class's plain ones."""
    if folder.foreign is not None:
        stack = read_folder(folder.path, task)
        return plain(task) if stack is None else stack.with_weights(folder.path)
    record = folder.manifest.sentence_transformers
    if not record:
        return plain(task)
    where = folder.path / MANIFEST_NAME
    stack = SentenceStack.from_json(record, where)
    if task == TOKEN_FEATURES:
        check_order(stack, where)
    return stack.with_weights(folder.path, folder.manifest.files)


def plain(task: str) -> SentenceStack:
    """An encoder without a sentence-transformers folder: sentence vectors by mean pooling; the
    others' pooling (or head) is in the graph."""
    return SentenceStack((Pooling(),) if task == TOKEN_FEATURES else (),
                         prompts=dict(MODEL_CLASSES[task][1]))


def _lowercase_first(backend) -> None:
    """do_lower_case: a Lowercase normalizer before the tokenizer's own, unless it has one
    (sentence-transformers' Transformer module does this to the fast tokenizer it loads)."""
    current = backend.normalizer
    if isinstance(current, normalizers.Lowercase):
        return
    if isinstance(current, normalizers.Sequence):
        try:
            parts = list(current)
        except TypeError:  # a tokenizers release whose Sequence does not iterate
            parts = [current]
        if any(isinstance(p, normalizers.Lowercase) for p in parts):
            return
    else:
        parts = [] if current is None else [current]
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), *parts])
