"""The family table (bertonnx.runtime.core.families) against transformers 4.57, and the rule that
keeps it the one table: a model_type string is written in at most two modules (its row and
build/keys.py's key map), never switched on elsewhere.

transformers is the reference: each row's class prefix names real classes, its tokenizer is the
class AutoTokenizer maps the model_type to, and its position offset, token types and poolers
are what tiny random transformers models of the family do.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import transformers
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

from bertonnx.runtime.core import tokenizer_families
from bertonnx.runtime.core.contract import hf_class
from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.families import (DEFAULT_MODEL_TYPE, FAMILIES, config_spellings,
                                            family, usable_positions)
from bertonnx.runtime.core.tasks import EXPORT_TASKS, TASKS

ROOT = Path(__file__).resolve().parents[3]
MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra", "albert",
               "mpnet", "deberta-v2", "modernbert")
SMALL = dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=16, max_position_embeddings=40)


def tiny_config(model_type: str, **ours):
    """A tiny transformers config of the family, our field names spelt the family's way."""
    row = family(model_type)
    hf_name = {mine: hf for hf, mine in row.config_names.items()}
    sizes = {**SMALL, **({"embedding_size": 8} if "embedding_size" in row.defaults else {}),
             # ModernBERT's default [PAD] (50283) is past the tiny vocabulary
             **({"pad_token_id": 3} if row.defaults.get("pad_token_id", 0) >= 50 else {}),
             **ours}
    return transformers.AutoConfig.for_model(
        model_type, **{hf_name.get(k, k): v for k, v in sizes.items()})


def test_the_table_holds_every_family_once():
    assert tuple(FAMILIES) == MODEL_TYPES
    assert all(FAMILIES[m].model_type == m for m in FAMILIES)
    assert family() is FAMILIES[DEFAULT_MODEL_TYPE]


def test_an_unknown_model_type_is_one_line_naming_the_known():
    with pytest.raises(ConfigError) as err:
        family("deberta")
    msg = str(err.value)
    assert "model_type 'deberta' is not supported" in msg and "\n" not in msg
    assert ", ".join(MODEL_TYPES) in msg


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_transformers_has_the_classes_the_row_names(model_type):
    row = family(model_type)
    for task in EXPORT_TASKS:
        name = row.class_prefix + TASKS[task].hf_suffix
        assert hf_class(task, model_type) == name
        assert isinstance(getattr(transformers, name), type), name
    if row.pretraining_serves is not None:
        assert isinstance(getattr(transformers, f"{row.class_prefix}ForPreTraining"), type)
        assert row.pretraining_serves in EXPORT_TASKS
    assert type(tiny_config(model_type)).__name__ == f"{row.class_prefix}Config"


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_the_tokenizer_is_autotokenizers_and_has_a_row(model_type):
    row = family(model_type)
    slow, fast = TOKENIZER_MAPPING_NAMES[model_type]
    assert fast == row.tokenizer + "Fast"
    assert slow in (None, row.tokenizer)  # None: sentencepiece is not installed
    assert row.tokenizer in {f.name for f in tokenizer_families.FAMILIES}


def test_declared_family_reads_the_row(tmp_path):
    read = {tmp_path / "config.json": {"model_type": "camembert"}}.get
    assert tokenizer_families.declared_family(tmp_path, {}, read).name == "CamembertTokenizer"
    read = {tmp_path / "config.json": {"model_type": "deberta"}}.get
    assert tokenizer_families.declared_family(tmp_path, {}, read) is None


@pytest.mark.parametrize("pad", [None, 4])  # 4: no family's default (MPNet ignores it)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_position_offset_and_token_types_are_transformers(model_type, pad):
    row = family(model_type)
    config = tiny_config(model_type, **({} if pad is None else {"pad_token_id": pad}))
    pad = config.pad_token_id
    if row.positions_from_padding:  # a config.json without pad_token_id: transformers' default
        assert transformers.AutoConfig.for_model(model_type).pad_token_id == \
            row.defaults["pad_token_id"]
    assert hasattr(config, "type_vocab_size") == row.token_types
    assert (row.fixed.get("type_vocab_size") == 0) == (not row.token_types)

    torch.manual_seed(0)
    model = getattr(transformers, f"{row.class_prefix}Model")(config).eval()
    if row.attention == "rotary":  # no table: ModernBERT's layers rotate by the index 0..T-1
        assert not hasattr(model.embeddings, "position_embeddings")
        assert usable_positions(config.to_dict()) == SMALL["max_position_embeddings"]
        return
    seen = []
    model.embeddings.position_embeddings.register_forward_hook(
        lambda module, args, out: seen.append(args[0]))
    n, length = 5, SMALL["max_position_embeddings"] - row.position_offset(pad)
    ids = torch.full((2, length), pad)
    ids[0, :n] = torch.arange(10, 10 + n)  # clear of every pad id tried
    ids[1, :] = 7  # the longest sequence the table covers
    with torch.no_grad():
        model(input_ids=ids, attention_mask=(ids != pad).long())
    positions = seen[0].expand(2, -1)
    first = row.position_offset(pad)
    assert positions[0, :n].tolist() == list(range(first, first + n))
    assert positions[1, -1].item() == SMALL["max_position_embeddings"] - 1
    assert usable_positions(config.to_dict()) == length


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_pooler_presence_is_transformers(model_type):
    row = family(model_type)
    tasks = (*EXPORT_TASKS, *(("pretraining",) if row.builds_pretraining else ()))
    for task in tasks:
        suffix = "ForPreTraining" if task == "pretraining" else TASKS[task].hf_suffix
        model = getattr(transformers, row.class_prefix + suffix)(tiny_config(model_type))
        has = any(".pooler." in f".{name}" for name, _ in model.named_parameters())
        # the tasks that run on another's class (reranking and zero-shot on
        # ForSequenceClassification) have that class's pooler: the class's first task names it
        owner = next(t for t in (*EXPORT_TASKS, task) if t == "pretraining" or
                     TASKS[t].hf_suffix == suffix)
        assert has == (owner in row.pooler_tasks), (model_type, task)


def test_config_spellings_cover_the_families_own_names():
    assert config_spellings("num_attention_heads") == ("num_attention_heads", "n_heads")
    assert config_spellings("hidden_size") == ("hidden_size", "dim")
    assert config_spellings("vocab_size") == ("vocab_size",)


# --- the one-table rule, read from the source ----------------------------------------------------

def _string_constants(path: Path) -> list[str]:
    """Every str literal of a module, less docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_each_model_type_is_written_in_at_most_two_modules():
    where: dict[str, set[str]] = {m: set() for m in MODEL_TYPES}
    modules = [p for d in ("build", "export", "runtime", "bench")
               for p in (ROOT / d).rglob("*.py")]
    assert len(modules) > 40  # the check reads the tree
    for path in modules:
        found = set(_string_constants(path)) & set(MODEL_TYPES)
        for m in found:
            where[m].add(path.relative_to(ROOT).as_posix())
    for m, files in where.items():
        assert "runtime/core/families.py" in files, m
        assert len(files) <= 2, f"{m!r} is written in {sorted(files)}: read the family row"


def test_the_checker_skips_docstrings(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""bert"""\ndef f():\n    """roberta"""\n    return "albert"  # "electra"\n')
    assert _string_constants(src) == ["albert"]
