"""Hugging Face checkpoint folders: `load_checkpoint` / `load_pretrained` in, `save_pretrained` out.

Reads model.safetensors, sharded safetensors (with index), pytorch_model.bin (weights_only) from a
local folder or a hub id and converts keys with the family's table in keys.py (BERT, RoBERTa,
XLM-R, CamemBERT, DistilBERT, ELECTRA, ALBERT: config.json's model_type picks it).
`load_checkpoint` returns the model with what loading learnt about the folder (a
`LoadedCheckpoint`); `load_pretrained` (the public API) just the model. Writing — config.json +
model.safetensors that `transformers.<Family>For<Task>.from_pretrained` loads with no missing or
unexpected keys — is in save.py, which heads.py's `Bert.save_pretrained` calls without importing
this module.
"""
from __future__ import annotations

import json
import logging
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import huggingface_hub
import torch
from safetensors.torch import load_file

from bertonnx.runtime.core import (bge_m3, colbert, cross_encoder, defaults,
                                   sentence_transformers, sparse_encoder)
from bertonnx.runtime.core.contract import ARCHITECTURE_TASKS, task_of_architectures
from bertonnx.runtime.core.errors import ArtifactError, ConfigError
from bertonnx.runtime.core.families import DEFAULT_MODEL_TYPE, family
from bertonnx.runtime.core.files import read_json_object
from bertonnx.runtime.core.tasks import EXPORT_TASKS

from .config import BertConfig
from .heads import TASKS as TASK_SPECS
from .heads import Bert, task_spec
from .keys import key_table
from .save import TOKENIZER_FILES, hf_state_dict, save_pretrained, write_config

__all__ = ["LoadedCheckpoint", "load_checkpoint", "load_pretrained", "save_pretrained",
           "hf_state_dict", "write_config", "read_state_dict", "convert_state_dict", "resolve",
           "infer_task", "inferred_task", "default_model_dir", "TOKENIZER_FILES", "WEIGHT_FILES"]

log = logging.getLogger("bertonnx")

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def default_model_dir() -> Path:
    """The default checkpoint (all-MiniLM-L6-v2): bertonnx.runtime.core.defaults names it."""
    return defaults.checkpoint_dir()


def resolve(path_or_hub_id: str | Path) -> Path:
    """A local folder as is, `default` as the default checkpoint; otherwise a hub id downloaded
    (config, weights, tokenizer, and a sentence-transformers model's module list and pooling)."""
    path = Path(defaults.resolve_checkpoint(path_or_hub_id)).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ArtifactError(f"{path} is a file, not a model folder",
                            "pass the folder that holds config.json")
    name = str(path_or_hub_id)
    if not defaults.HUB_ID.match(name) or name.startswith("."):
        raise ArtifactError(f"model folder {name} does not exist", "check the path")
    try:
        patterns = ["config.json", "*.safetensors", "*.safetensors.index.json",
                    "pytorch_model.bin", "pytorch_model*.bin", "pytorch_model.bin.index.json",
                    *TOKENIZER_FILES,
                    # a sentence-transformers model's modules after the encoder (export
                    # carries them: runtime/core/sentence_transformers.py)
                    "modules.json", "*Pooling/config.json", "sentence_*config.json",
                    "*Dense/config.json", "*Dense/model.safetensors", "*Dense/pytorch_model.bin",
                    # a CrossEncoder's activation (runtime/core/cross_encoder.py)
                    "config_sentence_transformers.json",
                    # a MultiVectorEncoder's mask (runtime/core/multi_vector_encoder.py), a
                    # Stanford ColBERT's settings (colbert.py), BGE-M3's heads (bge_m3.py)
                    "*MultiVectorMask/config.json", colbert.STANFORD_METADATA,
                    *bge_m3.HEAD_FILES]
        return Path(huggingface_hub.snapshot_download(name, allow_patterns=patterns))
    except Exception as e:  # offline, unknown repo, gated: all one message for the user
        raise ArtifactError(
            f"{name} is not a local folder and could not be fetched from the Hugging Face hub "
            f"({type(e).__name__})", "check the path, or the hub id and your network") from e


def infer_task(path_or_hub_id: str | Path) -> str:
    """The task the folder is for (`inferred_task`)."""
    return inferred_task(path_or_hub_id)[0]


def inferred_task(path_or_hub_id: str | Path) -> tuple[str, str]:
    """(the task the folder is for, where that came from — what `bertonnx export` says):
    a sentence-transformers folder's own files say it (a SentenceTransformer's Pooling module,
    a SparseEncoder's SpladePooling, a CrossEncoder's: ranking with one label, else
    text-classification); else config.json's `architectures` (e.g. RobertaForMaskedLM ->
    fill-mask; the table is the runtime contract's ARCHITECTURE_TASKS, every family's
    classes)."""
    folder = resolve(path_or_hub_id)
    config = folder / "config.json"
    if not config.is_file():
        raise ArtifactError(f"no config.json in {folder}", "point at a Hugging Face model folder")
    hf = read_json_object(config, "restore the file")
    try:  # an unsupported family is the problem to name, not its class names
        family(hf.get("model_type", DEFAULT_MODEL_TYPE))
    except ConfigError as e:
        raise ConfigError(f"{config}: {e.problem}", e.fix) from e
    name = path_or_hub_id
    if bge_m3.is_bge_m3_folder(folder):  # FlagEmbedding's two heads beside the encoder
        return "bge-m3", f"from {name}'s colbert_linear.pt and sparse_linear.pt: a BGE-M3"
    if colbert.is_stanford_folder(folder):
        return "multi-vector", f"from {name}'s config.json architectures: a Stanford ColBERT"
    if colbert.is_colbert_folder(folder):  # PyLate ColBERT, ST MultiVectorEncoder: token vectors
        return "multi-vector", f"from {name}'s config_sentence_transformers.json: a ColBERT"
    embedder = sentence_transformers.folder_task(folder)  # a SentenceTransformer folder
    if embedder is not None:
        return embedder, f"from {name}'s modules.json: a SentenceTransformer with a Pooling module"
    if sparse_encoder.is_splade_folder(folder):  # a SparseEncoder: its MLM logits pooled
        return "sparse-embedding", f"from {name}'s modules.json: a SparseEncoder with SpladePooling"
    ce = cross_encoder.read_cross_encoder(folder)
    if ce is not None:
        return cross_encoder.folder_task(folder), (
            f"from {name}'s CrossEncoder files: {ce.num_labels} label"
            f"{'' if ce.num_labels == 1 else 's'}")
    arches = hf.get("architectures") or []
    tasks = {ARCHITECTURE_TASKS[a] for a in arches if a in ARCHITECTURE_TASKS}
    if len(tasks) != 1:
        said = f"says {', '.join(arches)}" if arches else "names no architectures"
        raise ConfigError(f"cannot tell the task of {path_or_hub_id}: its config.json {said}",
                          f"pass --task (one of {', '.join(EXPORT_TASKS)})")
    return tasks.pop(), f"from {name}'s config.json architectures: {', '.join(arches)}"


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """All tensors of a HF checkpoint folder, by their HF names. Never unpickles code."""
    def reason(e: Exception) -> str:  # torch's unpickling errors run to many lines
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"

    def load_bin(p: Path):
        try:
            return torch.load(p, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as e:
            raise ArtifactError(f"{p} holds pickled objects other than tensors; refused because "
                                "unpickling them can run code",
                                "re-save the checkpoint as safetensors from a trusted copy") from e
        except Exception as e:
            raise ArtifactError(f"cannot read {p} ({reason(e)})",
                                "re-save the checkpoint as safetensors") from e

    def load_st(p: Path):
        try:
            return load_file(p)
        except Exception as e:
            raise ArtifactError(f"cannot read {p} ({reason(e)})",
                                "the file is damaged or not safetensors; re-download it") from e

    for name, reader in (("model.safetensors", load_st), ("pytorch_model.bin", load_bin)):
        if (folder / name).is_file():
            return reader(folder / name)
        index = folder / f"{name}.index.json"
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (ValueError, KeyError, AttributeError, TypeError) as e:
                raise ArtifactError(f"{index} is not a shard index ({reason(e)})",
                                    "restore the file from the original checkpoint") from e
            state = {}
            for shard in shards:
                if not (folder / shard).is_file():
                    raise ArtifactError(f"shard {shard} listed in {index.name} is missing",
                                        "download every shard of the checkpoint")
                state.update(reader(folder / shard))
            return state
    raise ArtifactError(f"no weights in {folder}",
                        f"expected one of {', '.join(WEIGHT_FILES)} (TF/Flax weights are not read)")


def convert_state_dict(hf_state: dict[str, torch.Tensor], model: Bert) -> tuple[dict, list, list]:
    """HF names -> ours. Returns (ours, unused-by-this-task HF keys, unknown HF keys)."""
    wanted = model.state_dict()
    keys = key_table(model.config.model_type, legacy=model.config.legacy)
    ours, unused, unknown = {}, [], []
    for key, tensor in hf_state.items():
        try:
            name = keys.to_ours(key)
        except KeyError:
            unknown.append(key)
            continue
        if name is None:
            continue
        if name not in wanted:
            unused.append(key)  # e.g. a pooler or MLM head the task does not carry
            continue
        ours[name] = tensor
    return ours, unused, unknown


@dataclass(frozen=True)
class LoadedCheckpoint:
    """A loaded model and what loading learnt about its folder."""
    model: Bert                    # eval mode
    source_dir: Path | None        # the local folder read (a hub id's download folder);
                                   # None for a model made in memory (export wraps those)
    head_initialised: list[str]    # our names of weights the folder lacked, drawn at load
    # our names of head weights loaded from a head config.json's architectures say was trained
    # for `trained_for`, another task (a sequence classifier's read as a token classifier's)
    head_other_task: tuple[str, ...] = ()
    trained_for: str | None = None
    # a checksum of each of those weights as loaded: a caller that trains the head in memory
    # (finetune, fit_head) before exporting this record no longer has an untrained one
    head_sums: dict = field(default_factory=dict)

    def untrained_head(self) -> dict:
        """The manifest's `untrained_head` record (runtime/core/untrained.py), in HF names:
        {} when the checkpoint trained this head for the model's task."""
        c = self.model.config
        to_hf = key_table(c.model_type, legacy=c.legacy).to_hf
        state = self.model.state_dict()

        def as_loaded(names):  # a head trained since (any of its weights moved) is trained
            moved = any(k in self.head_sums and _checksum(state[k]) != self.head_sums[k]
                        for k in names)
            return [] if moved else [to_hf(k) for k in names]

        record = {}
        if as_loaded(self.head_other_task):
            record["trained_for"] = self.trained_for
            record["other_task"] = as_loaded(self.head_other_task)
        # a pooler drawn at load (reported, as transformers reports it) feeds no output of a
        # head that does not read it (feature-extraction's): not an untrained head there
        reads_pooler = getattr(self.model.head, "reads_pooler", True)
        initialised = [k for k in self.head_initialised
                       if reads_pooler or not k.startswith("encoder.pooler.")]
        if as_loaded(initialised):
            record["initialised"] = as_loaded(initialised)
        return record

    def save_pretrained(self, out_dir: str | Path) -> Path:
        """The model's HF folder, with the source folder's tokenizer files beside it."""
        return save_pretrained(self.model, out_dir, tokenizer_from=self.source_dir)


def _checksum(t: torch.Tensor) -> float:
    return float(t.detach().double().abs().sum())


def load_checkpoint(path_or_hub_id: str | Path, task: str, *, num_labels: int | None = None,
                    id2label: dict | None = None, warn: bool = True) -> LoadedCheckpoint:
    """A HF BERT-family checkpoint as our model for `task`, in eval mode, with its source folder.

    Head weights the checkpoint lacks are initialised and reported in a warning (`warn=False`:
    only in the record, for a caller that reports them itself); any other missing key, any key
    the table does not know and any shape mismatch is an error naming them.
    """
    spec = task_spec(task)  # an unknown task is refused before any file is read
    folder = resolve(path_or_hub_id)
    config = BertConfig.from_hf(folder)
    # what the folder chooses about the head beyond config.json (a SparseEncoder's pooling)
    head_options = spec.folder_options(folder) if spec.folder_options else {}
    if id2label is not None:
        config = config.replace(id2label=id2label)
    elif num_labels is not None and num_labels != config.num_labels:
        config = config.with_labels(num_labels)
    # Heads the checkpoint lacks are drawn from a fixed seed (without touching the caller's RNG):
    # two loads of the same folder are the same model, so `bertonnx parity --reference` holds.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Bert(config, task, **head_options)
    hf_state = read_state_dict(folder)
    if colbert.is_stanford_folder(folder):   # its projection is a Dense module (colbert.py)
        hf_state = {k: v for k, v in hf_state.items() if k not in colbert.STANFORD_KEYS}
    ours, unused, unknown = convert_state_dict(hf_state, model)
    row = config.family
    ours_to_hf = key_table(config.model_type, legacy=config.legacy).to_hf
    if unknown:
        raise ArtifactError(
            f"{folder} has weights that are not {row.name}'s: "
            f"{', '.join(sorted(unknown)[:8])}"
            + (f" (+{len(unknown) - 8} more)" if len(unknown) > 8 else ""),
            f"load a {row.name} checkpoint ({row.class_prefix}Model or "
            f"{row.class_prefix}For<Task>), or fix model_type in config.json")
    wanted = model.state_dict()
    reinit = []
    for name, tensor in list(ours.items()):
        if tensor.shape != wanted[name].shape:
            if name.startswith("head.") and (num_labels is not None or id2label is not None):
                reinit.append(name)  # the user asked for another label set: new classifier
                del ours[name]
                continue
            raise ArtifactError(
                f"weight {ours_to_hf(name)} in {folder} has shape {tuple(tensor.shape)}, the "
                f"config implies {tuple(wanted[name].shape)}",
                "fix config.json to match the weights (or the weights to match it)")
    missing = sorted(set(wanted) - set(ours))
    # Like transformers, a pooler absent from the checkpoint (saved from BertForMaskedLM,
    # token classification or QA) is initialised with the head: it feeds only the head.
    body = [k for k in missing if not k.startswith(("head.", "encoder.pooler."))]
    if body:
        raise ArtifactError(
            f"{folder} lacks encoder weights: {', '.join(ours_to_hf(k) for k in body[:8])}"
            + (f" (+{len(body) - 8} more)" if len(body) > 8 else ""),
            "the checkpoint is incomplete; re-download or re-save it")
    model.load_state_dict(ours, strict=False)
    trained_for = task_of_architectures(read_json_object(folder / "config.json", "restore the "
                                                         "file").get("architectures"))
    other_task = ()
    # tasks on one transformers class share its trained head (a ForMaskedLM's MLM head is
    # fill-mask's and sparse-embedding's)
    same_class = trained_for in TASK_SPECS and TASK_SPECS[trained_for].hf_suffix == spec.hf_suffix
    if trained_for not in (None, task) and not same_class \
            and {trained_for, task} != {"fill-mask", "pretraining"}:
        # a head of the same shape and names, trained for another task (pretraining's MLM
        # head is fill-mask's own)
        other_task = tuple(sorted(k for k in ours if k.startswith("head.")))
    if missing and warn:
        log.warning("%s: initialised head weights not in the checkpoint for task %s: %s",
                    folder, task, ", ".join(ours_to_hf(k) for k in missing))
    if unused:
        log.info("%s: weights not used by %s: %s", folder, model.hf_class, ", ".join(unused))
    state = model.state_dict()
    return LoadedCheckpoint(model.eval(), folder, missing, other_task,
                            trained_for if other_task else None,
                            {k: _checksum(state[k]) for k in [*missing, *other_task]})


def load_pretrained(path_or_hub_id: str | Path, task: str, *, num_labels: int | None = None,
                    id2label: dict | None = None) -> Bert:
    """The model of `load_checkpoint` (the public API: users want the module)."""
    return load_checkpoint(path_or_hub_id, task, num_labels=num_labels, id2label=id2label).model
