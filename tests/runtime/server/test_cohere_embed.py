"""Cohere's /v2/embed on a real server (uvicorn in a thread), driven by the real `cohere` client
(`ClientV2.embed`): every embedding type equal to the library's vectors quantized with the
export's calibrated ranges (runtime/core/quantize_embeddings.py, itself compared with
sentence-transformers in tests/runtime/core/pipelines/test_embedding_dimensions.py), input_type
mapped to the folder's prompts, output_dimension, truncate, and Cohere's errors.
"""
from __future__ import annotations

import base64
import json
import shutil

import httpx
import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.contract import MANIFEST_NAME
from bertonnx.runtime.core.quantize_embeddings import quantize
from bertonnx.runtime.server import Limits, ServeOptions

from tests.runtime._threaded_server import threaded_server
from tests.runtime.core.pipelines.test_embedding_dimensions import folders  # noqa: F401

cohere = pytest.importorskip("cohere")
NAME, MAX_INPUTS = "tiny-st", 5
TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris", "music"]
LONG = " ".join(["the cat sat on the mat with the dog in paris"] * 12)


@pytest.fixture(scope="module")
def pipe(folders):  # noqa: F811 — the fixture imported above
    return load(folders["mat"][1])


@pytest.fixture(scope="module")
def url(pipe):
    options = ServeOptions(name=NAME, limits=Limits(max_inputs=MAX_INPUTS, max_tokens=400))
    with threaded_server(pipe, NAME, options) as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    return cohere.ClientV2(api_key="unused", base_url=url, max_retries=0)


def test_every_embedding_type(client, pipe):
    got = client.embed(model=NAME, input_type="search_document", texts=TEXTS,
                       embedding_types=["float", "int8", "uint8", "binary", "ubinary",
                                        "base64"])
    assert got.response_type == "embeddings_by_type" and got.texts == TEXTS
    assert got.meta.billed_units.input_tokens > 0
    want = np.asarray(pipe(TEXTS, prompt_name="document"), np.float32)
    e = got.embeddings
    np.testing.assert_array_equal(np.asarray(e.float_, np.float32), want)
    ranges = pipe.embedding_ranges(32)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        np.testing.assert_array_equal(getattr(e, precision),
                                      quantize(want, precision, ranges).tolist())
    assert all(-128 <= v <= 127 for row in e.int8 + e.binary for v in row)
    assert len(e.ubinary[0]) == 32 // 8
    decoded = [np.frombuffer(base64.b64decode(b), dtype="<f4") for b in e.base64]
    np.testing.assert_array_equal(np.stack(decoded), want)
    # left out: float only
    only = client.embed(model=NAME, input_type="search_document", texts=TEXTS[:1])
    assert only.embeddings.int8 is None
    np.testing.assert_array_equal(np.asarray(only.embeddings.float_, np.float32), want[:1])


def test_input_type_and_output_dimension(client, pipe):
    query = client.embed(model=NAME, input_type="search_query", texts=TEXTS,
                         embedding_types=["float"])
    np.testing.assert_array_equal(np.asarray(query.embeddings.float_, np.float32),
                                  np.asarray(pipe(TEXTS, prompt_name="query"), np.float32))
    # the folder has no "clustering" prompt: its default (none) prompt
    plain = client.embed(model=NAME, input_type="clustering", texts=TEXTS)
    np.testing.assert_array_equal(np.asarray(plain.embeddings.float_, np.float32),
                                  np.asarray(pipe(TEXTS), np.float32))
    cut = client.embed(model=NAME, input_type="search_query", texts=TEXTS, output_dimension=8,
                       embedding_types=["float", "int8"])
    want = np.asarray(pipe(TEXTS, prompt_name="query", dimensions=8), np.float32)
    np.testing.assert_array_equal(np.asarray(cut.embeddings.float_, np.float32), want)
    np.testing.assert_array_equal(cut.embeddings.int8,
                                  quantize(want, "int8", pipe.embedding_ranges(8)).tolist())


def test_truncate(client, pipe, url):
    end = client.embed(model=NAME, input_type="clustering", texts=[LONG], truncate="END")
    np.testing.assert_array_equal(np.asarray(end.embeddings.float_, np.float32),
                                  np.asarray(pipe([LONG]), np.float32))
    start = client.embed(model=NAME, input_type="clustering", texts=[LONG], truncate="START")
    np.testing.assert_array_equal(
        np.asarray(start.embeddings.float_, np.float32),
        np.asarray(pipe([LONG], truncation_direction="left"), np.float32))
    with pytest.raises(cohere.BadRequestError) as e:
        client.embed(model=NAME, input_type="clustering", texts=["a", LONG], truncate="NONE")
    assert "text 1 is longer than the model's" in e.value.body["message"]
    # max_tokens: each text cut to its first N tokens before the model
    few = client.embed(model=NAME, input_type="clustering", texts=[TEXTS[1]], max_tokens=3)
    np.testing.assert_array_equal(np.asarray(few.embeddings.float_, np.float32),
                                  np.asarray(pipe(["a dog ran"]), np.float32))
    assert few.texts == [TEXTS[1]]
    last = client.embed(model=NAME, input_type="clustering", texts=[TEXTS[1]], max_tokens=2,
                        truncate="START")
    np.testing.assert_array_equal(np.asarray(last.embeddings.float_, np.float32),
                                  np.asarray(pipe(["in paris"]), np.float32))


def test_truncate_none_with_long_inputs_chunk_windows_the_text(pipe):
    """serve --long-inputs chunk: truncate NONE windows a text past the model (the library's
    long_inputs="chunk") instead of refusing it; the x-windows header counts the windows."""
    options = ServeOptions(name=NAME, long_inputs="chunk", limits=Limits(max_tokens=400))
    with threaded_server(pipe, NAME, options) as u:
        got = cohere.ClientV2(base_url=u, api_key="unused").with_raw_response.embed(
            model=NAME, input_type="clustering", texts=["a", LONG], truncate="NONE")
        windows = got.headers["x-windows"].split(",")
        assert windows[0] == "1" and int(windows[1]) > 1
        np.testing.assert_array_equal(
            np.asarray(got.data.embeddings.float_, np.float32),
            np.asarray(pipe(["a", LONG], long_inputs="chunk"), np.float32))


def _refused(client, status, message, **kw):
    error = {400: cohere.BadRequestError, 404: cohere.NotFoundError,
             422: cohere.UnprocessableEntityError}[status]
    body = {"model": NAME, "input_type": "search_query", "texts": TEXTS, **kw}
    with pytest.raises(error) as e:
        client.embed(**body)
    assert set(e.value.body) == {"id", "message"} and message in e.value.body["message"]


def test_refusals_in_cohere_shape(client, url, folders, tmp_path):  # noqa: F811
    _refused(client, 404, "not found: this server serves 'tiny-st'", model="embed-v4.0")
    _refused(client, 400, "input_type must be one of", input_type="image")
    _refused(client, 400, "embedding_types must be a list of", embedding_types=["bit"])
    _refused(client, 400, "truncate must be NONE, START or END", truncate="MIDDLE")
    _refused(client, 400, "images are not supported", images=["data:image/png;base64,AA=="])
    _refused(client, 400, "texts must be a non-empty list", texts=[])
    _refused(client, 400, "dimensions=12: this model was trained for 16, 8",
             output_dimension=12)
    _refused(client, 400, "output_dimension must be an integer of at least 1",
             output_dimension=0)
    _refused(client, 400, "dimensions must be an integer from 1 to 32", output_dimension=64,
             embedding_types=["int8"])
    _refused(client, 422, f"--max-inputs {MAX_INPUTS}", texts=["a"] * (MAX_INPUTS + 1))
    r = httpx.post(url + "/v2/embed", content=b"{nope", timeout=30)
    assert r.status_code == 400 and "not valid JSON" in r.json()["message"]
    # an export without ranges (one written before them): int8 is refused, naming why
    old = tmp_path / "old"
    shutil.copytree(folders["raw"][1], old)
    manifest = json.loads((old / MANIFEST_NAME).read_text())
    del manifest["embeddings"]
    (old / MANIFEST_NAME).write_text(json.dumps(manifest))
    raw = load(old)
    with threaded_server(raw, NAME, ServeOptions(name=NAME)) as other:
        no_ranges = cohere.ClientV2(api_key="unused", base_url=other, max_retries=0)
        _refused(no_ranges, 400, "need int8 ranges calibrated for 32 dimensions, which this "
                 "export lacks", embedding_types=["float", "uint8"])
        ok = no_ranges.embed(model=NAME, input_type="search_query", texts=TEXTS,
                             embedding_types=["ubinary"])
        assert len(ok.embeddings.ubinary) == len(TEXTS)


def test_openai_and_tei_dimensions_on_a_matryoshka_model(url, pipe):
    """The same parameter behind OpenAI's and TEI's `dimensions`: a declared size is the
    library's cut vector, another is refused in each protocol's shape, naming the sizes."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    got = client.embeddings.create(model=NAME, input=TEXTS, dimensions=8)
    want = np.asarray(pipe(TEXTS, dimensions=8), np.float32)
    np.testing.assert_array_equal(np.asarray([d.embedding for d in got.data], np.float32), want)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=NAME, input=TEXTS, dimensions=12)
    assert e.value.body["param"] == "dimensions"
    assert "trained for 16, 8 dimensions" in e.value.body["message"]
    tei = httpx.post(url + "/embed", json={"inputs": TEXTS, "dimensions": 16}, timeout=30)
    np.testing.assert_array_equal(np.asarray(tei.json(), np.float32),
                                  np.asarray(pipe(TEXTS, dimensions=16), np.float32))
    refused = httpx.post(url + "/embed", json={"inputs": TEXTS, "dimensions": 12}, timeout=30)
    assert refused.status_code == 422 and refused.json()["error_type"] == "Validation"
    assert "trained for 16, 8 dimensions" in refused.json()["error"]
