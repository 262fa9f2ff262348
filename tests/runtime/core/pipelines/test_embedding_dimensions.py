"""Issue 42: `dimensions` (sentence-transformers' truncate_dim) and the int8/uint8/binary
embeddings of runtime/core/quantize_embeddings.py, against sentence-transformers 5.7 itself.

Two tiny random folders built with sentence-transformers: "mat" (mean pooling, Normalize,
prompts "query"/"document", matryoshka_dimensions [16, 8] in config_sentence_transformers.json)
and "raw" (mean pooling, no Normalize). Texts of different lengths in one batch (padding).
Floats within 1e-4 of `SentenceTransformer.encode(truncate_dim=k)`; quantized codes with the
export's own ranges equal to `quantize_embeddings(theirs, precision, ranges=...)` at every
position whose float is not within 1e-4 of a bucket boundary (floor((x - min) / step): a float
that close may fall either side, and then the codes differ by exactly 1); sign bits likewise
except within 1e-4 of 0.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.util.quantization import quantize_embeddings

from bertonnx.export import ExportOptions, export_model
from bertonnx.export.calibrate import calibration_sentences
from bertonnx.runtime import load
from bertonnx.runtime.core.errors import ArtifactError, InputError
from bertonnx.runtime.core.quantize_embeddings import calibrate, quantize
from bertonnx.runtime.core.sentence_transformers import matryoshka_dimensions

from tests.conftest import EMB
from tests.runtime.core.pipelines._st_folders import save_v5

ATOL = 1e-4
TEXTS = ["The cat sat on the mat .", "a dog", "happy music and film in london " * 4, "paris"]
SIZES = [16, 8]


@pytest.fixture(scope="module")
def folders(tiny_checkpoint, tmp_path_factory):
    """name -> (sentence-transformers folder, its export)."""
    root = tmp_path_factory.mktemp("dims")
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # a tiny model: a second thread only contends for the cores
    mat = save_v5(tiny_checkpoint(EMB), root / "mat", "mean", normalize=True,
                  prompts={"query": "query : ", "document": "passage : "})
    config = json.loads((mat / "config_sentence_transformers.json").read_text())
    (mat / "config_sentence_transformers.json").write_text(
        json.dumps({**config, "matryoshka_dimensions": SIZES}))
    raw = save_v5(tiny_checkpoint(EMB), root / "raw", "mean")
    out = {}
    for name, src in (("mat", mat), ("raw", raw)):
        export_model(src, EMB, root / f"{name}-onnx", ExportOptions(parity=False))
        out[name] = (src, root / f"{name}-onnx")
    yield out
    torch.set_num_threads(before)


def _boundary(theirs: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """Where a float lies within ATOL of its bucket's edge (floor((x - min) / step))."""
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps == 0, 1, steps)
    position = (theirs - ranges[0]) / steps
    return np.abs(position - np.round(position)) * steps < ATOL


def test_quantize_is_sentence_transformers_quantize_embeddings():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 40)).astype(np.float32)
    vectors[:, 3] = 0.25                     # a dimension that never varies: step 1
    ranges = calibrate(vectors[:30])
    np.testing.assert_array_equal(ranges, np.vstack((vectors[:30].min(0), vectors[:30].max(0))))
    for precision in ("int8", "uint8"):
        want = quantize_embeddings(vectors, precision, ranges=ranges)
        got = quantize(vectors, precision, ranges)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        # ST's calibration_embeddings are the same ranges
        np.testing.assert_array_equal(
            got, quantize_embeddings(vectors, precision, calibration_embeddings=vectors[:30]))
    for precision in ("binary", "ubinary"):
        want = quantize_embeddings(vectors, precision)
        got = quantize(vectors, precision)
        assert got.dtype == want.dtype and got.shape == (50, 5)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(InputError, match="int8 needs calibrated ranges"):
        quantize(vectors, "int8")
    with pytest.raises(InputError, match="ranges are"):
        quantize(vectors, "uint8", ranges[:, :5])


def test_dimensions_is_truncate_dim(folders):
    for name, normalize in (("mat", True), ("raw", False)):
        src, out = folders[name]
        st, pipe = SentenceTransformer(str(src), device="cpu"), load(out)
        for k in ([8, 16, 32] if name == "mat" else [5, 17]):
            theirs = st.encode(TEXTS, truncate_dim=k, normalize_embeddings=normalize,
                               prompt_name="query" if name == "mat" else None)
            ours = pipe(TEXTS, dimensions=k, **({"prompt_name": "query"} if name == "mat"
                                                else {}))
            assert np.asarray(ours).shape == (len(TEXTS), k)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=ATOL)
            if normalize:
                np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1, atol=1e-6)
    # alone, without padding: the same vector
    np.testing.assert_allclose(pipe(TEXTS[2], dimensions=5), ours[2][:5], atol=1e-6)


def test_matryoshka_sizes_are_the_only_cuts(folders, tmp_path):
    pipe = load(folders["mat"][1])
    assert pipe.matryoshka_dimensions == (16, 8)
    with pytest.raises(InputError, match=r"dimensions=12: this model was trained for 16, 8 "
                                         r"dimensions \(its matryoshka_dimensions\)"):
        pipe(TEXTS, dimensions=12)
    with pytest.raises(InputError, match="dimensions must be an integer from 1 to 32"):
        pipe(TEXTS, dimensions=33)
    with pytest.raises(InputError, match="dimensions needs a pooled vector"):
        pipe(TEXTS, dimensions=8, pooling="none", normalize=False)
    # config.json declares them too; a bad declaration is one line
    (tmp_path / "config.json").write_text(json.dumps({"matryoshka_dimensions": [64, 256]}))
    assert matryoshka_dimensions(tmp_path) == (256, 64)
    (tmp_path / "config.json").write_text(json.dumps({"matryoshka_dimensions": "64"}))
    with pytest.raises(ArtifactError, match="matryoshka_dimensions is not a list"):
        matryoshka_dimensions(tmp_path)


def test_export_calibrates_ranges_that_quantize_as_sentence_transformers(folders):
    src, out = folders["mat"]
    st, pipe = SentenceTransformer(str(src), device="cpu"), load(out)
    record = pipe.folder.manifest.embeddings
    assert record["matryoshka_dimensions"] == [16, 8] and set(record["ranges"]) == {
        "32", "16", "8"}
    sentences = calibration_sentences()
    assert len(sentences) == 300
    for k in (32, 16, 8):
        ranges = pipe.embedding_ranges(k)
        # the export's default vectors of width k on the calibration text (ST: the default
        # prompt is none here; truncate_dim renormalized, as the defaults normalize)
        theirs = st.encode(sentences, truncate_dim=k, normalize_embeddings=True)
        np.testing.assert_allclose(ranges, calibrate(theirs), rtol=0, atol=ATOL)
        texts_theirs = st.encode(TEXTS, truncate_dim=k, normalize_embeddings=True)
        ours = np.asarray(pipe(TEXTS, dimensions=k), np.float32)
        near = _boundary(texts_theirs, ranges)
        for precision in ("int8", "uint8"):
            want = quantize_embeddings(texts_theirs, precision, ranges=ranges).astype(int)
            got = quantize(ours, precision, ranges).astype(int)
            np.testing.assert_array_equal(got[~near], want[~near])
            assert np.abs(got - want).max() <= 1
        # sign bits: packed as ST packs them, equal wherever the float is not within 1e-4 of 0
        sure = np.abs(texts_theirs) >= ATOL
        bits = np.unpackbits(quantize(ours, "ubinary"), axis=1)[:, :k].astype(bool)
        np.testing.assert_array_equal(bits[sure], (texts_theirs > 0)[sure])
        mine_as_theirs = np.where(sure, texts_theirs, ours)
        for precision in ("binary", "ubinary"):
            np.testing.assert_array_equal(quantize(ours, precision),
                                          quantize_embeddings(mine_as_theirs, precision))


def test_the_command_line_takes_dimensions(folders, capsys):
    from bertonnx.runtime.cli import main

    out = folders["mat"][1]
    assert main(["embed", str(out), "a dog", "--dimensions", "8", "--json"]) == 0
    np.testing.assert_allclose(json.loads(capsys.readouterr().out),
                               load(out)("a dog", dimensions=8), rtol=0, atol=1e-6)
    # a size the model was not trained for: one line, exit != 0, no traceback
    assert main(["embed", str(out), "a dog", "--dimensions", "12"]) != 0
    err = capsys.readouterr().err
    assert "dimensions=12: this model was trained for 16, 8" in err and "Traceback" not in err


def test_only_sentence_vectors_are_calibrated(tiny_export):
    from bertonnx.runtime.core.manifest import Manifest

    assert Manifest.read(tiny_export("fill-mask")).embeddings == {}
    record = Manifest.read(tiny_export(EMB)).embeddings
    # a plain encoder (mean pooling, unit vectors), no Matryoshka sizes: the full width only
    assert record["matryoshka_dimensions"] == [] and list(record["ranges"]) == ["32"]
    low, high = np.asarray(record["ranges"]["32"])
    assert (low < high).all() and (low >= -1).all() and (high <= 1).all()
