"""build/checkpoint.py's `resolve` by hub id: what it asks the hub for is enough to read each kind
of folder as its local copy reads. The hub is a local folder behind huggingface_hub's own file
filter (`filter_repo_objects`, what snapshot_download applies to allow_patterns), so a file the
patterns miss is missing here as it would be online — a BGE-M3 whose heads stayed behind would
export as a plain encoder, a Stanford ColBERT without its artifact.metadata with PyLate's
defaults instead of its own lengths."""
from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.utils import filter_repo_objects

from bertonnx.build.checkpoint import inferred_task, resolve
from bertonnx.runtime.core.multi_vector_encoder import read_multi_vector

from tests.colbert_reference import STANFORD
from tests.runtime.core.pipelines._colbert import colbert_references  # noqa: F401 — fixture
from tests.runtime.core.pipelines.test_bge_m3 import m3_reference  # noqa: F401 — fixture
from tests.runtime.core.pipelines.test_multi_vector_encoder import (  # noqa: F401 — fixture
    st6_references)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """hub(folder) -> a hub id whose download is `folder`'s files the patterns allow."""
    repos: dict[str, Path] = {}

    def snapshot_download(repo_id, allow_patterns=None, **_):
        source = repos[repo_id]
        files = [p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()]
        out = tmp_path / "downloads" / repo_id.replace("/", "--")
        for rel in filter_repo_objects(files, allow_patterns=allow_patterns):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / rel, out / rel)
        return str(out)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)

    def add(folder: Path) -> str:
        repo = f"someone/{folder.name}"
        repos[repo] = folder
        return repo

    return add


@pytest.mark.parametrize("case", ["plain", "residual", STANFORD])
def test_a_colbert_by_hub_id_reads_as_its_folder(colbert_references, hub, case):
    local = colbert_references / case
    repo = hub(local)
    assert inferred_task(repo)[0] == inferred_task(local)[0] == "multi-vector"
    assert read_multi_vector(resolve(repo)) == read_multi_vector(local)


def test_a_bge_m3_by_hub_id_keeps_its_heads(m3_reference, hub):
    local = m3_reference / "model"
    repo = hub(local)
    assert inferred_task(repo)[0] == inferred_task(local)[0] == "bge-m3"


def test_a_multi_vector_encoder_by_hub_id_keeps_its_mask(st6_references, hub):
    local = st6_references / "min"   # a MultiVectorMask with a skiplist and kept ids
    assert read_multi_vector(resolve(hub(local))) == read_multi_vector(local)
