"""sentence-transformers 6's MultiVectorEncoder folders read torch-free, into the settings the
multi-vector pipeline runs (runtime/core/colbert.py's ColbertSettings, PyLate's names).

sentence-transformers 6.2 (multi_vector_encoder/model.py, base/modules/transformer.py,
multi_vector_encoder/modules/multi_vector_mask.py) saves a MultiVectorEncoder as:

    modules.json                      Transformer at the root, Dense module(s) on
                                      token_embeddings, MultiVectorMask, Normalize
    sentence_bert_config.json         the Transformer's query_length / document_length (a cut in
                                      tokens; null: the model's maximum) and query_expansion
                                      {"strategy": "fixed" | "min", "attend", "token", "length"}
    N_MultiVectorMask/config.json     skiplist_words, skiplist_tasks, keep_only_token_ids
    config_sentence_transformers.json model_type "MultiVectorEncoder", prompts {"query",
                                      "document"}, default_prompt_name, similarity_fn_name

Where it differs from PyLate's folders: the prompts are text put before the input and tokenized
with it (PyLate inserts a prefix token after [CLS]), so a length counts the prompt's tokens;
"fixed" expansion pads a query to `length` tokens all told, "min" only up to `length`, the cut
being query_length; a skiplist word the vocabulary lacks leaves the skiplist (PyLate skips [UNK]
for it), and the skiplist may apply to queries (skiplist_tasks); without a MultiVectorMask an
expansion token is kept only when attended to; normalizing is a module of its own. Refused,
each in one line naming it: a Normalize module missing or before a Dense, any other module
(token pooling, a Router), processing_kwargs on the Transformer, similarity_fn_name meanmaxsim,
PyLate's keys in a MultiVectorEncoder's config. A PyLate folder MultiVectorEncoder loaded and
saved again reads as any other (its prefixes are prompts, registered as special tokens).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .colbert import (ST_MODEL_TYPE, ColbertSettings, is_stanford_folder, read_colbert,
                      read_stanford)
from .errors import ArtifactError
from .files import read_json_object
from .sentence_modules import TOKENS
from .sentence_transformers import (MODULES_FILE, ST_CONFIG, TOKEN_FEATURES, TRANSFORMER_CONFIGS,
                                    _dense, _transformer, read_modules)

# PyLate's settings, which MultiVectorEncoder also honours in its own config (as prompts and
# registered prefix tokens, or the Transformer's expansion); its own saves never write them
PYLATE_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length",
               "query_expansion", "do_query_expansion", "attend_to_expansion_tokens",
               "attend_to_mask_tokens", "skiplist_words")
# the modules bertonnx computes after the Transformer, by class name
MODULES = ("Dense", "MultiVectorMask", "Normalize")
STRATEGIES = ("fixed", "min")        # query_expansion's
FIX = "export a MultiVectorEncoder of Transformer, Dense, MultiVectorMask and Normalize modules"


def read_multi_vector(path: str | Path) -> ColbertSettings:
    """A multi-vector folder's settings: sentence-transformers 6's MultiVectorEncoder or
    PyLate's ColBERT, as its config_sentence_transformers.json says (a Stanford checkpoint has
    none: colbert.read_stanford)."""
    if is_stanford_folder(path):
        return read_stanford(path)
    config = read_json_object(Path(path) / ST_CONFIG, "restore the file")
    if config.get("model_type") == ST_MODEL_TYPE:
        return read_multi_vector_encoder(path)
    return read_colbert(path)


def read_multi_vector_encoder(path: str | Path) -> ColbertSettings:
    """A MultiVectorEncoder folder's settings and Dense modules; ArtifactError naming what
    bertonnx would not reproduce."""
    path = Path(path)
    where = path / MODULES_FILE
    listed = read_modules(path)
    if not listed or listed[0][0].rsplit(".", 1)[-1] != "Transformer" \
            or listed[0][1] not in ("", "."):
        raise ArtifactError(f"{where} does not start with a Transformer module at the folder's "
                            "root", "re-save it with sentence-transformers "
                            "(MultiVectorEncoder(DIR).save(NEW_DIR)) and export that")
    limit, lower = _transformer(path, TOKEN_FEATURES)
    name = next((n for n in TRANSFORMER_CONFIGS if (path / n).is_file()), TRANSFORMER_CONFIGS[0])
    transformer = (read_json_object(path / name, "restore the file")
                   if (path / name).is_file() else {})
    if transformer.get("processing_kwargs"):   # they override the query and document lengths
        raise ArtifactError(f"{path / name} sets processing_kwargs, which bertonnx does not "
                            "apply to a MultiVectorEncoder", "remove them, or set "
                            "query_length / document_length instead, and export again")
    mods, normalized, mask = [], False, None
    for kind, rel in listed[1:]:
        short = kind.rsplit(".", 1)[-1]
        if not kind.startswith("sentence_transformers.") or short not in MODULES:
            raise ArtifactError(f"{where} lists module {kind}, which bertonnx does not compute "
                                "for a MultiVectorEncoder", FIX)
        if short == "Dense":
            dense = _dense(path, rel)
            if normalized or {dense.module_input_name, dense.module_output_name} != {TOKENS}:
                raise ArtifactError(f"{where} lists Dense module {rel} "
                                    + ("after Normalize" if normalized else
                                       f"on {dense.module_input_name}, not token vectors"),
                                    f"{FIX}, Normalize last")
            mods.append(replace(dense, module_input_name=TOKENS, module_output_name=TOKENS))
        elif short == "Normalize":
            normalized = True
        else:
            mask = read_json_object(path / rel / "config.json", "restore the file")
    if not normalized:   # the pipeline makes every token vector unit length, as Normalize does
        raise ArtifactError(f"{where} lists no Normalize module, so its token vectors are not "
                            "unit length; bertonnx's multi-vector always normalizes them",
                            f"{FIX}, Normalize last")
    st = read_json_object(path / ST_CONFIG, "restore the file")
    if (key := next((k for k in PYLATE_KEYS if k in st), None)) is not None:
        raise ArtifactError(f"{path / ST_CONFIG} sets PyLate's {key} beside model_type "
                            "MultiVectorEncoder, which bertonnx does not read",
                            "load the folder with MultiVectorEncoder, save it again, and "
                            "export that")
    if st.get("similarity_fn_name") not in (None, "maxsim"):
        raise ArtifactError(f"{path / ST_CONFIG} sets similarity_fn_name "
                            f"{st['similarity_fn_name']!r}; bertonnx ranks by maxsim",
                            "set it to maxsim (or null) and export again")
    return ColbertSettings(query_prefix="", document_prefix="", do_lower_case=lower,
                           modules=tuple(mods), **_prompts(st), **_expansion(transformer, limit),
                           **_mask(mask))


def _prompts(st: dict) -> dict:
    """encode_query / encode_document: the "query" / "document" prompt where the folder names
    one, else the default prompt (BaseModel._resolve_prompt)."""
    prompts = st.get("prompts") or {}
    default = prompts.get(st["default_prompt_name"]) if st.get("default_prompt_name") else None
    return {f"{side}_prompt": (prompts[side] if side in prompts else default) or ""
            for side in ("query", "document")}


def _expansion(transformer: dict, limit: int | None) -> dict:
    """The Transformer's lengths and query_expansion as ColbertSettings fields."""
    query, document = (transformer.get(k) or limit for k in ("query_length", "document_length"))
    expansion = transformer.get("query_expansion")
    if expansion is None:
        return dict(query_length=query, document_length=document, do_query_expansion=False)
    where = "sentence_bert_config.json's query_expansion"
    strategy = expansion.get("strategy") if isinstance(expansion, dict) else None
    if strategy not in STRATEGIES:
        raise ArtifactError(f"{where} has strategy {strategy!r}, not one of {STRATEGIES}",
                            "restore the file")
    length = expansion.get("length")
    fixed = strategy == "fixed"   # every query exactly `length` tokens: PyLate's query_length
    return dict(query_length=length if fixed else query, document_length=document,
                query_floor=None if fixed else length,
                attend_to_expansion_tokens=bool(expansion.get("attend")),
                expansion_token=expansion.get("token"))


def _mask(config: dict | None) -> dict:
    """MultiVectorMask's skiplist, the tasks it applies to and the ids a document keeps."""
    if config is None:   # no scoring mask: the attention mask decides
        return dict(skiplist_words=(), score_expansion=False, skip_unknown=False)
    tasks = config.get("skiplist_tasks")
    tasks = ["document"] if tasks is None else tasks
    keep = config.get("keep_only_token_ids")
    return dict(skiplist_words=tuple(config.get("skiplist_words") or ()),
                skiplist_tasks=(tasks,) if isinstance(tasks, str) else tuple(tasks),
                keep_only_token_ids=None if keep is None else tuple(int(i) for i in keep),
                skip_unknown=False)
