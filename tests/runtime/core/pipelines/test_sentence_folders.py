"""A sentence-transformers folder's own pooling and normalize (issue 31): read from its
modules.json (`FeatureExtractionPipeline.folder_defaults`), recorded in the export's manifest,
and the export's defaults thereafter; a module bertonnx does not compute is refused. Parity
with sentence-transformers itself (every module, both formats, the real all-MiniLM-L6-v2) is
test_sentence_transformers_parity.py's."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.contract import MANIFEST_NAME
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.pipelines import FeatureExtractionPipeline as FE
from bertonnx.runtime.core.pipelines import TextClassificationPipeline

from tests.conftest import EMB


def modules(folder: Path, *kinds: str, prefix: str = "sentence_transformers.models") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    listed = [{"idx": i, "name": str(i), "path": f"{i}_{k}" if i else "",
               "type": f"{prefix}.{k}"} for i, k in enumerate(kinds)]
    (folder / "modules.json").write_text(json.dumps(listed), encoding="utf-8")
    return folder


def pooling(folder: Path, config: dict) -> Path:
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


MEAN = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
CLASSIC_CLS = {"word_embedding_dimension": 32, "pooling_mode_cls_token": True,
               "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
               "pooling_mode_mean_sqrt_len_tokens": False}


def st_folder(checkpoint: Path, out: Path, kinds: list[str], config: dict) -> Path:
    """A copy of `checkpoint` made a (classic) sentence-transformers folder: modules.json
    listing `kinds`, its Pooling module's config.json `config`."""
    shutil.copytree(checkpoint, out)
    return pooling(modules(out, *kinds), config)


def test_classic_and_v5_folders(tmp_path):
    classic = pooling(modules(tmp_path / "a", "Transformer", "Pooling", "Normalize"), MEAN)
    assert FE.folder_defaults(classic) == {"normalize": True, "pooling": "mean"}
    # sentence-transformers 5 names its modules elsewhere and writes the mode as a string
    v5 = modules(tmp_path / "b", "Transformer", "Pooling",
                 prefix="sentence_transformers.sentence_transformer.modules")
    pooling(v5, {"pooling_mode": "cls", "include_prompt": True})
    assert FE.folder_defaults(v5) == {"normalize": False, "pooling": "cls"}
    # a plain transformers folder chooses nothing: the record's defaults stand
    assert FE.folder_defaults(tmp_path) == {}
    # other tasks take nothing from a folder
    assert TextClassificationPipeline.folder_defaults(classic) == {}


def test_what_bertonnx_does_not_compute_is_refused_in_one_line(tmp_path):
    folder = modules(tmp_path / "a", "Transformer", "Pooling", "Normalize")
    pooling(folder, {"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": False})
    assert FE.folder_defaults(folder) == {"normalize": True, "pooling": "max"}
    # a module the runtime does not compute, or one whose files are missing: refused, not
    # skipped (its vectors would differ from sentence-transformers')
    for kinds, message in ((("Transformer", "Pooling", "LayerNorm"),
                            "lists module sentence_transformers.models.LayerNorm, which "
                            "bertonnx does not compute"),
                           (("Transformer", "Pooling", "Dense"), "2_Dense/config.json is missing"),
                           (("Pooling", "Transformer"), "does not start with a Transformer")):
        other = pooling(modules(tmp_path / "-".join(kinds), *kinds), MEAN)
        with pytest.raises(ArtifactError, match=message):
            FE.folder_defaults(other)


def test_a_damaged_modules_json_is_one_clear_error(tmp_path):
    (tmp_path / "modules.json").write_text('{"not": "a list"}', encoding="utf-8")
    with pytest.raises(ArtifactError, match="modules.json is not a sentence-transformers "
                                            "module list"):
        FE.folder_defaults(tmp_path)


def test_export_records_the_folders_choice_and_load_checks_it(tiny_checkpoint, tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    src = st_folder(tiny_checkpoint(EMB), tmp_path / "src", ["Transformer", "Pooling"],
                    CLASSIC_CLS)
    out = tmp_path / "out"
    m = export_model(src, EMB, out, ExportOptions(parity=False))
    assert m.defaults == {"normalize": False, "pooling": "cls"}
    assert json.loads((out / MANIFEST_NAME).read_text())["defaults"] == m.defaults
    assert load(out).defaults["normalize"] is False

    # a manifest edited by hand: a default the task does not take, or a value its rule refuses
    data = json.loads((out / MANIFEST_NAME).read_text())
    for bad, message in (({"top_k": 3}, "sets defaults for top_k, which feature-extraction "
                                        "does not take"),
                         ({"normalize": "yes"}, "sets its own default badly: normalize must "
                                                "be true or false")):
        (out / MANIFEST_NAME).write_text(json.dumps({**data, "defaults": bad}))
        with pytest.raises(ArtifactError, match=message):
            load(out)


def test_minilm_chooses_mean_pooling_and_unit_vectors(minilm_dir, tmp_path):
    """Its export (tests/runtime/core/pipelines/test_sentence_transformers_parity.py) records
    this; the same folder without its Normalize module would keep raw vectors."""
    assert FE.folder_defaults(minilm_dir) == {"normalize": True, "pooling": "mean"}
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in minilm_dir.iterdir():
        if p.name != "modules.json":
            os.symlink(p, bare / p.name)
    listed = json.loads((minilm_dir / "modules.json").read_text())
    (bare / "modules.json").write_text(json.dumps([x for x in listed
                                                   if not x["type"].endswith("Normalize")]))
    assert FE.folder_defaults(bare) == {"normalize": False, "pooling": "mean"}


def test_a_folder_made_elsewhere_keeps_its_choice_loaded_or_adopted(tiny_checkpoint, tmp_path):
    """An Optimum folder of a sentence-transformers model: load() reads its modules.json as
    export reads a model folder's, and `adopt` records the same defaults."""
    from bertonnx.export.adopt import adopt  # torch: lazy

    from tests.conftest import make_foreign_export

    src = make_foreign_export(tiny_checkpoint(EMB), tmp_path / "optimum", EMB)
    pooling(modules(src, "Transformer", "Pooling"), CLASSIC_CLS)
    texts = ["the cat sat", "a dog"]
    theirs = load(src)
    assert theirs.defaults["normalize"] is False and theirs.defaults["pooling"] == "cls"
    m = adopt(src, tmp_path / "adopted")
    assert m.defaults == {"normalize": False, "pooling": "cls"}
    np.testing.assert_allclose(load(tmp_path / "adopted")(texts, return_tensors=True),
                               theirs(texts, return_tensors=True), rtol=0, atol=1e-5)
