"""What a sentence-transformers folder says about reading text, for every model class
(runtime/core/pipelines/sentence_folder.py), against sentence-transformers 5.7 itself: a
SparseEncoder's prompts and maximum length (as 5.4+ and as 5.0-5.3 save it) equal to
`SparseEncoder.encode`, a CrossEncoder's prompts equal to `CrossEncoder.rank`, truncation on
the left (TEI's truncation_direction) equal to each model with its tokenizer's
truncation_side "left"; the manifest version such an export is written with, which an older
bertonnx refuses in one line; and where `bertonnx export` says the task came from."""
from __future__ import annotations

import numpy as np
import pytest

from bertonnx.build.checkpoint import inferred_task
from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core import manifest as manifest_module
from bertonnx.runtime.core.errors import ArtifactError, InputError
from bertonnx.runtime.core.manifest import Manifest

from tests.runtime._compare import assert_same
from tests.runtime.core.pipelines._sparse import sparse_encoder_folder, to_sparse_v50
from tests.runtime.core.pipelines._st_folders import save_v5

st = pytest.importorskip("sentence_transformers")   # the test extra's reference

MAX = 12   # every folder's max_seq_length, below the 64 positions: long texts are cut there
# longer than 16 * MAX characters: the tokenizer sees only the end it keeps (Pipeline._part)
LONG = " ".join(["the cat sat on the mat with the dog by the house in paris"] * 20)
TEXTS = [LONG, "music and film", "the river runs to the sea in london"]
PROMPTS = {"query": "the cat ", "doc": "music "}
DOCS = ["the dog ran to the river in paris", LONG, "a cat", "film and music in london"]


def _export(folder, task, out):
    export_model(folder, task, out, ExportOptions(parity=False))
    return out


@pytest.fixture(scope="module")
def folders(tiny_checkpoint, tmp_path_factory):
    """name -> (sentence-transformers folder, its export), one of each kind, all with prompts, a
    default prompt and max_seq_length MAX."""
    root = tmp_path_factory.mktemp("folders")
    v54 = sparse_encoder_folder(tiny_checkpoint("fill-mask"), root / "sparse-v54",
                                max_seq_length=MAX, prompts=PROMPTS, default_prompt_name="query")
    ce = root / "ce"
    st.CrossEncoder(str(tiny_checkpoint("text-ranking")), max_length=MAX, prompts=PROMPTS,
                    default_prompt_name="query").save_pretrained(str(ce))
    made = {"sparse-v54": (v54, "sparse-embedding"),
            "sparse-v50": (to_sparse_v50(v54, root / "sparse-v50"), "sparse-embedding"),
            "cross-encoder": (ce, "text-ranking"),
            "embedder": (save_v5(tiny_checkpoint("feature-extraction"), root / "st", "mean",
                                 normalize=True, max_seq_length=MAX, prompts=PROMPTS),
                         "feature-extraction")}
    return {name: (folder, _export(folder, task, root / f"{name}-out"))
            for name, (folder, task) in made.items()}


def sparse_reference(folder, texts, left: bool = False, **kw) -> np.ndarray:
    model = st.SparseEncoder(str(folder), device="cpu")
    if left:
        model.tokenizer.truncation_side = "left"
    return model.encode(texts, convert_to_sparse_tensor=False, **kw).numpy()


def assert_sparse(got: list, want: np.ndarray) -> None:
    for i, (entries, row) in enumerate(zip(got, want)):
        ids = sorted(e["index"] for e in entries)
        assert ids == np.flatnonzero(row).tolist(), f"text {i}: other non-zero ids"
        assert max(abs(e["value"] - row[e["index"]]) for e in entries) <= 1e-4, f"text {i}"


@pytest.mark.parametrize("name", ["sparse-v54", "sparse-v50"])
def test_a_sparse_encoders_prompts_and_maximum_length(folders, name):
    folder, out = folders[name]
    pipe, ref = load(out), st.SparseEncoder(str(folder), device="cpu")
    assert ref.max_seq_length == pipe.max_length == MAX     # 5.0-5.3: sentence_bert_config's
    assert dict(pipe.prompts) == ref.prompts == {**PROMPTS, "document": ""}
    for kw in ({}, {"prompt_name": "doc"}, {"prompt_name": "document"}, {"prompt": "london "}):
        assert_sparse(pipe(TEXTS, **kw), sparse_reference(folder, TEXTS, **kw))
    with pytest.raises(InputError, match="prompt_name must be one of 'query', 'document', 'doc' "
                                         "or null, got 'passage'"):
        pipe(TEXTS, prompt_name="passage")


def test_a_cross_encoders_prompts(folders):
    folder, out = folders["cross-encoder"]
    pipe, ref = load(out), st.CrossEncoder(str(folder))
    assert ref.default_prompt_name == "query" and pipe.max_length == MAX
    for kw in ({}, {"prompt_name": "doc"}, {"prompt": ""}):
        assert_same(pipe("the cat", DOCS, **kw), ref.rank("the cat", DOCS, **kw))
    with pytest.raises(InputError, match="prompt_name must be one of 'doc', 'query' or null"):
        pipe("the cat", DOCS, prompt_name="document")   # a CrossEncoder has no default names


def test_left_truncation_is_the_tokenizers(folders):
    """truncation_direction "left" keeps a long text's end, where each model class cuts with
    its tokenizer's truncation_side "left" (TEI's truncation_direction: the same library)."""
    folder, out = folders["sparse-v54"]
    pipe = load(out)
    got = pipe(TEXTS, truncation_direction="left")
    assert_sparse(got, sparse_reference(folder, TEXTS, left=True))
    assert got[0] != pipe(TEXTS)[0] and got[1:] == pipe(TEXTS)[1:]   # only the long one moved
    folder, out = folders["cross-encoder"]
    ref = st.CrossEncoder(str(folder))
    ref.tokenizer.truncation_side = "left"
    assert_same(load(out)("the cat " * 8, DOCS, truncation_direction="Left"),
                ref.rank("the cat " * 8, DOCS))
    folder, out = folders["embedder"]
    ref = st.SentenceTransformer(str(folder), device="cpu")
    ref.tokenizer.truncation_side = "left"
    np.testing.assert_allclose(load(out)(TEXTS, prompt_name="doc", truncation_direction="left",
                                         return_tensors=True),
                               ref.encode(TEXTS, prompt_name="doc"), atol=1e-4, rtol=0)
    with pytest.raises(InputError, match="truncation_direction must be one of 'right', 'left'"):
        pipe(TEXTS, truncation_direction="middle")


def test_the_manifest_version_an_older_bertonnx_refuses(folders, tiny_export, monkeypatch):
    """An export whose answers depend on the folder's record says schema version 2, which a
    bertonnx that reads only version 1 (and would ignore the record) refuses in one line; any
    other export stays version 1, which it loads."""
    plain = tiny_export("feature-extraction")
    assert Manifest.read(plain).version == 1
    for name in folders:
        assert Manifest.read(folders[name][1]).version == 2, name
    monkeypatch.setattr(manifest_module, "MANIFEST_VERSION", 1)   # the reader before version 2
    Manifest.read(plain)
    with pytest.raises(ArtifactError, match=r"schema version 2, newer than this bertonnx "
                                            r"understands \(1\).*upgrade bertonnx"):
        Manifest.read(folders["embedder"][1])


def test_export_says_where_the_task_came_from(folders, tiny_checkpoint, tmp_path, capsys):
    assert inferred_task(folders["sparse-v50"][0]) == (
        "sparse-embedding", f"from {folders['sparse-v50'][0]}'s modules.json: a SparseEncoder "
                            "with SpladePooling")
    assert inferred_task(folders["embedder"][0])[1].endswith(
        "modules.json: a SentenceTransformer with a Pooling module")
    plain = tiny_checkpoint("fill-mask")
    assert inferred_task(plain) == (
        "fill-mask", f"from {plain}'s config.json architectures: BertForMaskedLM")
    # a CrossEncoder of three labels is text-classification, which takes no prompt: its
    # default prompt is refused before anything is converted
    ce = tmp_path / "ce3"
    st.CrossEncoder(str(tiny_checkpoint("zero-shot-classification")), prompts=PROMPTS,
                    default_prompt_name="query").save_pretrained(str(ce))
    assert main(["export", str(ce), "--out", str(tmp_path / "out"), "--no-parity"]) != 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"bertonnx: task text-classification (from {ce}'s CrossEncoder files: "
                      "3 labels)")
    assert err[-1].startswith(f"bertonnx: error: {ce} is a CrossEncoder whose default prompt "
                              "('query') goes before every query")
    assert not (tmp_path / "out").exists()
