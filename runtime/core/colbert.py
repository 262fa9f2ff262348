"""A PyLate ColBERT folder read torch-free: how it turns a text into token vectors (multi-vector).

PyLate (pylate 1.6, models/colbert.py) saves a ColBERT model as a sentence-transformers folder:

    modules.json                      Transformer at the root, then pylate.models.Dense.Dense
                                      module(s) that project every token vector
    N_Dense/config.json               in_features, out_features, bias, activation_function,
                                      use_residual; weights model.safetensors (linear.weight,
                                      residual.weight where use_residual and the widths differ)
    config_sentence_transformers.json model_type "ColBERT", query_prefix / document_prefix (a
                                      token put after [CLS]), query_length / document_length
                                      (tokens, the prefix included), do_query_expansion,
                                      attend_to_expansion_tokens, skiplist_words

`ColBERT.encode(texts, is_query=...)` then: tokenizes to length - 1 tokens (the prefix is the
last one), a query padded to that length with [MASK] (query expansion: PyLate makes [MASK] the
pad token); puts the prefix id after [CLS]; attends to the [MASK]s only with
attend_to_expansion_tokens; projects with the Dense modules; normalizes each token vector; and
keeps every query token (expansion included), or a document's attended tokens whose id is not in
the skiplist (each word's `convert_tokens_to_ids`: a word the vocabulary lacks is [UNK]'s id, so
[UNK] tokens are dropped too). sentence-transformers 6's MultiVectorEncoder folders read into the
same settings (runtime/core/multi_vector_encoder.py: its prompts are text, its expansion a dict on
the Transformer, its skiplist a module). The export records these settings
(`ColbertSettings.to_json`) beside the Dense modules.
"""
from __future__ import annotations

import string
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .errors import ArtifactError
from .files import read_json_object
from .sentence_modules import TOKENS, Dense, safetensors_shapes
from .sentence_transformers import (MODULES_FILE, ST_CONFIG, TOKEN_FEATURES, _dense,
                                    _transformer, read_modules)

MODEL_TYPE = "ColBERT"          # config_sentence_transformers.json's model_type (PyLate)
ST_MODEL_TYPE = "MultiVectorEncoder"   # ... sentence-transformers 6's
# A Stanford (colbert-ai) checkpoint: a transformers folder whose config.json names HF_ColBERT,
# the projection `linear.weight` in the encoder's own weights file, its settings in
# artifact.metadata (pylate 1.6 models/colbert.py: ColBERT.__init__, Dense.from_stanford_weights)
STANFORD_ARCHITECTURE = "HF_ColBERT"
STANFORD_METADATA = "artifact.metadata"
# its weights: safetensors, or a .bin that only export reads (weights only, with torch)
STANFORD_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
STANFORD_KEYS = ("linear.weight",)   # the projection: carried as a Dense module, not the graph
# the manifest's record; newer ones are refused (2: the MultiVectorEncoder fields)
RECORD_VERSION = 2


@dataclass(frozen=True)
class ColbertSettings:
    """How PyLate reads queries and documents, under its names (ColBERT.__init__'s defaults),
    and what sentence-transformers 6's MultiVectorEncoder does otherwise (the fields after
    `modules`; their defaults are PyLate's behaviour). A length of None: the model's maximum."""

    query_prefix: str = "[Q] "
    document_prefix: str = "[D] "
    query_length: int | None = 32
    document_length: int | None = 180
    do_query_expansion: bool = True
    attend_to_expansion_tokens: bool = False
    skiplist_words: tuple[str, ...] = tuple(string.punctuation)
    do_lower_case: bool = False
    modules: tuple[Dense, ...] = field(default=())   # after the encoder, on token vectors
    # text put before a query / document (MultiVectorEncoder's prompts; PyLate's prefix is a token)
    query_prompt: str = ""
    document_prompt: str = ""
    # expansion strategy "min": a query is expanded up to this many tokens and cut at
    # query_length; None ("fixed", PyLate's): every query expanded and cut to query_length
    query_floor: int | None = None
    expansion_token: str | None = None   # None: [MASK]
    skiplist_tasks: tuple[str, ...] = ("document",)
    # a skiplist word the vocabulary lacks skips [UNK] (PyLate), or nothing (MultiVectorMask)
    skip_unknown: bool = True
    # expansion tokens are kept (scored) though not attended to: PyLate's; a MultiVectorEncoder's
    # MultiVectorMask does it, and without one only attended tokens are kept
    score_expansion: bool = True
    keep_only_token_ids: tuple[int, ...] | None = None   # a document keeps only these ids

    def __post_init__(self):
        for name in ("query_length", "document_length", "query_floor"):
            value = getattr(self, name)
            if value is None:   # the model's maximum; but fixed expansion pads to query_length
                if name == "query_length" and self.do_query_expansion and self.query_floor is None:
                    raise ArtifactError("ColBERT query expansion has no query length",
                                        "restore config_sentence_transformers.json")
                continue
            least = 1 if name == "query_floor" else 2
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ArtifactError(f"ColBERT {name} {value!r} is not a length of {least} or more",
                                    "restore config_sentence_transformers.json")

    def to_json(self) -> dict:
        data = asdict(self)
        data["skiplist_words"] = list(self.skiplist_words)
        data["skiplist_tasks"] = list(self.skiplist_tasks)
        if self.keep_only_token_ids is not None:
            data["keep_only_token_ids"] = list(self.keep_only_token_ids)
        data["modules"] = [m.to_json() for m in self.modules]
        return {"version": RECORD_VERSION, "colbert": data}

    @classmethod
    def from_json(cls, record: dict, where) -> "ColbertSettings":
        try:
            if record.get("version", 0) > RECORD_VERSION:
                raise ArtifactError(f"{where} records a ColBERT record of version "
                                    f"{record['version']}, which this bertonnx cannot read",
                                    "upgrade bertonnx, or export the model again")
            data = dict(record["colbert"])
            mods = []
            for m in data.pop("modules"):
                args = {k: v for k, v in m.items() if k != "type"}
                mods.append(Dense(**args))
            keep = data.get("keep_only_token_ids")
            return cls(**{**data, "skiplist_words": tuple(data["skiplist_words"]),
                          "skiplist_tasks": tuple(data.get("skiplist_tasks", ("document",))),
                          "keep_only_token_ids": None if keep is None else tuple(keep),
                          "modules": tuple(mods)})
        except (KeyError, TypeError, AttributeError) as e:
            raise ArtifactError(f"{where} has a damaged ColBERT record ({e!r})",
                                "export the model again") from None


def is_colbert_folder(path: str | Path) -> bool:
    """Whether `path` is a PyLate ColBERT or a sentence-transformers MultiVectorEncoder folder
    (config_sentence_transformers.json says so), or a Stanford ColBERT checkpoint."""
    config = Path(path) / ST_CONFIG
    return (config.is_file() and read_json_object(config, "restore the file").get(
        "model_type") in (MODEL_TYPE, ST_MODEL_TYPE)) or is_stanford_folder(path)


def is_stanford_folder(path: str | Path) -> bool:
    """A Stanford ColBERT checkpoint: no modules.json, and config.json's first architecture
    HF_ColBERT (what PyLate looks at)."""
    path = Path(path)
    if (path / MODULES_FILE).is_file() or not (path / "config.json").is_file():
        return False
    arches = read_json_object(path / "config.json", "restore the file").get("architectures")
    return isinstance(arches, list) and arches[:1] == [STANFORD_ARCHITECTURE]


def read_stanford(path: str | Path) -> ColbertSettings:
    """A Stanford checkpoint's settings as PyLate loads them: its projection (`linear.weight`,
    no bias) on every token vector; the prefixes, lengths and whether expansion tokens are
    attended to from artifact.metadata where it names them ([unused0] / [unused1] and PyLate's
    defaults where not); PyLate's skiplist and expansion."""
    path = Path(path)
    weights = next((path / n for n in STANFORD_WEIGHTS if (path / n).is_file()), None)
    if weights is None:
        raise ArtifactError(f"{path} has no {' or '.join(STANFORD_WEIGHTS)}",
                            "restore the checkpoint's weights")
    meta = (read_json_object(path / STANFORD_METADATA, "restore the file")
            if (path / STANFORD_METADATA).is_file() else {})
    if weights.suffix == ".bin":
        # a .bin is never opened by the runtime: the projection's shape is what the checkpoint
        # says (artifact.metadata's dim, config.json's hidden_size); export reads the tensor
        # (weights only, with torch) and checks it against this shape
        hidden = read_json_object(path / "config.json", "restore the file").get("hidden_size")
        shape = [meta.get("dim"), hidden]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
            raise ArtifactError(f"{path} keeps its weights in {weights.name} and its "
                                f"{STANFORD_METADATA} names no dim", "restore artifact.metadata, "
                                "or load it with pylate, save it again and export that folder")
    else:
        shape = safetensors_shapes(weights).get(STANFORD_KEYS[0])
    if shape is None or len(shape) != 2:
        raise ArtifactError(f"{weights} holds no 2-D {STANFORD_KEYS[0]}, the projection a "
                            "Stanford ColBERT keeps beside its encoder", "restore the file")
    dense = Dense(in_features=shape[1], out_features=shape[0], bias=False,
                  activation_function="Identity", weights=weights.name,
                  module_input_name=TOKENS, module_output_name=TOKENS)
    known = {k: meta[m] for k, m in (("query_length", "query_maxlen"),
                                     ("document_length", "doc_maxlen"),
                                     ("attend_to_expansion_tokens", "attend_to_mask_tokens"))
             if meta.get(m) is not None}
    _, lower = _transformer(path, TOKEN_FEATURES)
    return ColbertSettings(query_prefix=meta.get("query_token_id") or "[unused0]",
                           document_prefix=meta.get("doc_token_id") or "[unused1]",
                           do_lower_case=lower, modules=(dense,), **known)


def read_colbert(path: str | Path) -> ColbertSettings:
    """A PyLate folder's settings and Dense modules; ArtifactError for what bertonnx would not
    reproduce (another module, a folder of neither kind); a Stanford checkpoint: read_stanford."""
    path = Path(path)
    if is_stanford_folder(path):
        return read_stanford(path)
    listed = read_modules(path)
    if not listed or listed[0][0].rsplit(".", 1)[-1] != "Transformer":
        raise ArtifactError(f"{path} has no modules.json starting with a Transformer (a "
                            "Stanford ColBERT checkpoint?)", "load it with pylate "
                            "(models.ColBERT(PATH)), save it again, and export that folder")
    _, lower = _transformer(path, TOKEN_FEATURES)
    mods = []
    for kind, rel in listed[1:]:
        if kind.rsplit(".", 1)[-1] != "Dense":
            raise ArtifactError(f"{path / 'modules.json'} lists module {kind}, which bertonnx "
                                "does not compute for ColBERT", "export a folder of a "
                                "Transformer and Dense modules, as PyLate saves them")
        config = read_json_object(path / rel / "config.json", "restore the file")
        # PyLate's Dense projects every token vector (its forward reads token_embeddings)
        mods.append(replace(_dense(path, rel), module_input_name=TOKENS,
                            module_output_name=TOKENS,
                            residual=bool(config.get("use_residual"))))
    st = read_json_object(path / ST_CONFIG, "restore the file")
    known = {k: st[k] for k in ("query_prefix", "document_prefix", "query_length",
                                "document_length", "do_query_expansion",
                                "attend_to_expansion_tokens") if st.get(k) is not None}
    if st.get("skiplist_words") is not None:
        known["skiplist_words"] = tuple(st["skiplist_words"])
    settings = ColbertSettings(**known, do_lower_case=lower, modules=tuple(mods))
    if not settings.do_query_expansion:   # ColBERT.__init__: no expansion, nothing to attend
        settings = replace(settings, attend_to_expansion_tokens=False)
    return settings
