"""TEI's routes (/embed, /tokenize, /info) on a real server (uvicorn in a thread, tiny exports),
with httpx and huggingface_hub's InferenceClient, TEI's own client: vectors equal to the
library's, TEI's defaults, its error shapes and statuses, the limits refused before the model
runs, and the route table by task.
"""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from bertonnx.runtime.server import Limits, ServeOptions

from tests.runtime._threaded_server import threaded_server

TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris", "music"]
MAX_INPUTS, MAX_TOKENS = 4, 100


@pytest.fixture(scope="module")
def pipe(ours):
    return ours("feature-extraction")


@pytest.fixture(scope="module")
def url(pipe):
    options = ServeOptions(name="tiny-embed", limits=Limits(max_inputs=MAX_INPUTS,
                                                            max_tokens=MAX_TOKENS,
                                                            max_body_bytes=20_000))
    with threaded_server(pipe, "tiny-embed", options) as u:
        yield u


def post(url, path, body, **kw) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30, **kw)


def test_embed_is_the_library_embedding(url, pipe):
    got = post(url, "/embed", {"inputs": TEXTS})
    assert got.status_code == 200
    np.testing.assert_array_equal(np.array(got.json(), np.float32),
                                  np.array(pipe(TEXTS, normalize=True), np.float32))
    # one text in: still a list of one vector (TEI's EmbedResponse)
    one = post(url, "/embed", {"inputs": TEXTS[1]}).json()
    assert len(one) == 1
    np.testing.assert_array_equal(np.float32(one[0]), np.float32(pipe(TEXTS[1])))
    raw = post(url, "/embed", {"inputs": TEXTS, "normalize": False}).json()
    np.testing.assert_array_equal(np.float32(raw), np.float32(pipe(TEXTS, normalize=False)))
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1)
    # dimensions: the raw vector's first values, normalized after (TEI's order)
    cut = np.float32(post(url, "/embed", {"inputs": TEXTS, "dimensions": 5}).json())
    first = np.float32(raw)[:, :5]
    np.testing.assert_allclose(cut, first / np.linalg.norm(first, axis=1, keepdims=True),
                               atol=1e-7)
    short = post(url, "/embed", {"inputs": TEXTS, "dimensions": 5, "normalize": False}).json()
    np.testing.assert_array_equal(np.float32(short), first)


def test_long_inputs_chunk_windows_what_truncate_false_refuses(pipe):
    """--long-inputs chunk: a text past the model with truncate false is embedded as windows
    (the library's long_inputs="chunk"), the x-windows header counts each input's, and every
    window's tokens count against --max-tokens; truncating requests are unchanged."""
    too_long = " ".join(["music"] * 70)   # 72 tokens: a 64-token window and a second one
    options = ServeOptions(name="tiny-embed", long_inputs="chunk",
                           limits=Limits(max_inputs=MAX_INPUTS, max_tokens=MAX_TOKENS))
    with threaded_server(pipe, "tiny-embed", options) as u:
        got = post(u, "/embed", {"inputs": ["a cat", too_long], "truncate": False})
        assert got.status_code == 200 and got.headers["x-windows"] == "1,2"
        np.testing.assert_array_equal(
            np.float32(got.json()), np.float32(pipe(["a cat", too_long], long_inputs="chunk")))
        assert not np.allclose(got.json()[1], pipe(too_long), atol=1e-4)
        cut = post(u, "/embed", {"inputs": ["a cat", too_long]})
        assert "x-windows" not in cut.headers
        np.testing.assert_array_equal(np.float32(cut.json()),
                                      np.float32(pipe(["a cat", too_long])))
        refusal(post(u, "/embed", {"inputs": [too_long] * 2, "truncate": False}), 422,
                "Validation", f"--max-tokens {MAX_TOKENS}")


def test_huggingface_hub_inference_client(url, pipe, hf_hub_online):
    client = hf_hub_online.InferenceClient(model=url + "/embed")
    got = client.feature_extraction(TEXTS[0], truncate=True, truncation_direction="Right")
    np.testing.assert_array_equal(got, np.float32([pipe(TEXTS[0])]))
    raw = client.feature_extraction(TEXTS[0], normalize=False)
    np.testing.assert_array_equal(raw, np.float32([pipe(TEXTS[0], normalize=False)]))


def refusal(response, status: int, error_type: str, *words: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == error_type, body
    for w in words:
        assert w in body["error"], body
    return body["error"]


def test_embed_refusals_are_tei_errors(url, pipe):
    refusal(post(url, "/embed", {"inputs": []}), 400, "Empty", "`inputs` cannot be empty")
    refusal(post(url, "/embed", {"inputs": ["a"] * (MAX_INPUTS + 1)}), 422, "Validation",
            f"batch size {MAX_INPUTS + 1} > maximum allowed batch size {MAX_INPUTS}",
            f"--max-inputs {MAX_INPUTS}")
    long = " ".join(["music"] * 40)      # 42 tokens each with [CLS] and [SEP]
    refusal(post(url, "/embed", {"inputs": [long] * 3}), 422, "Validation",
            "126 tokens", f"--max-tokens {MAX_TOKENS}")
    too_long = " ".join(["music"] * 70)  # past the model's 64 positions
    msg = refusal(post(url, "/embed", {"inputs": ["a cat", too_long], "truncate": False}), 422,
                  "Validation", f"`inputs` must have less than {pipe.max_length} tokens",
                  "Given: 72", "input 1")
    assert msg.startswith("Input validation error: ")
    assert post(url, "/embed", {"inputs": too_long, "truncate": True}).status_code == 200
    assert post(url, "/embed", {"inputs": too_long}).status_code == 200   # auto-truncate
    # Left keeps the end of a long text: the library's truncation_direction
    left = post(url, "/embed", {"inputs": too_long + " the cat", "truncation_direction": "Left"})
    np.testing.assert_array_equal(
        np.float32(left.json()), np.float32([pipe(too_long + " the cat",
                                                  truncation_direction="left")]))
    assert not np.allclose(left.json(), [pipe(too_long + " the cat")])
    refusal(post(url, "/embed", {"inputs": "a", "truncation_direction": "Middle"}), 422,
            "Validation", "`truncation_direction` must be \"Right\" or \"Left\"")
    refusal(post(url, "/embed", {"inputs": "a", "normalise": False}), 422, "Validation",
            "'normalise'")
    refusal(post(url, "/embed", {"inputs": "a", "normalize": "no"}), 422, "Validation",
            "`normalize` must be true or false")
    refusal(post(url, "/embed", {"inputs": [[101, 102]]}), 422, "Validation", "token ids")
    refusal(post(url, "/embed", {"inputs": "a", "dimensions": 0}), 422, "Validation",
            "`dimensions` should be positive")
    refusal(post(url, "/embed", {"inputs": "a", "dimensions": 33}), 422, "Validation",
            "maximum embedding dimension (32)")
    refusal(post(url, "/embed", {"normalize": True}), 422, "Validation", "missing field `inputs`")
    refusal(post(url, "/embed", {"inputs": ["a", " "]}), 422, "Validation", "text #1 is empty")
    refusal(httpx.post(url + "/embed", content=b"{nope", timeout=30), 400, "Validation",
            "not valid JSON")
    refusal(post(url, "/embed", {"inputs": "a" * 30_000}), 413, "Validation", "--max-body-bytes")
    refusal(post(url, "/embed", {"inputs": "a", "prompt_name": "nope"}), 422, "Validation",
            "prompt_name must be")


def test_tokenize_is_the_tokenizer(url, pipe):
    got = post(url, "/tokenize", {"inputs": ["the cat", "café paris"]})
    assert got.status_code == 200
    first, second = got.json()
    ids = pipe.tokenizer.backend.encode("the cat").ids
    assert [t["id"] for t in first] == ids
    assert first[0] == {"id": ids[0], "text": "[CLS]", "special": True, "start": None,
                        "stop": None}
    assert first[1] == {"id": ids[1], "text": "the", "special": False, "start": 0, "stop": 3}
    # offsets are UTF-8 bytes, as TEI's: "é" is two of them
    paris = next(t for t in second if t["text"] == "paris")
    assert (paris["start"], paris["stop"]) == (6, 11)
    assert second[1]["text"] == "café" and (second[1]["start"], second[1]["stop"]) == (0, 5)
    bare = post(url, "/tokenize", {"inputs": "the cat", "add_special_tokens": False}).json()
    assert [t["id"] for t in bare[0]] == ids[1:-1]
    refusal(post(url, "/tokenize", {"inputs": []}), 400, "Empty")
    refusal(post(url, "/tokenize", {"inputs": "a", "prompt_name": "nope"}), 422, "Validation",
            "prompt_name must be")
    refusal(post(url, "/tokenize", {"inputs": ["a"] * 9}), 422, "Validation", "--max-inputs")


def test_info_is_the_export(url, pipe):
    info = httpx.get(url + "/info", timeout=30).json()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert info["served_model_name"] == "tiny-embed" and info["model_dtype"] == "float32"
    assert info["model_id"] == pipe.folder.manifest.source
    assert info["max_input_length"] == pipe.max_length == 64
    assert info["max_client_batch_size"] == MAX_INPUTS and info["auto_truncate"] is True
    assert set(info) == {"model_id", "model_sha", "model_dtype", "served_model_name",
                         "model_type", "max_concurrent_requests", "max_input_length",
                         "max_batch_tokens", "max_batch_requests", "max_client_batch_size",
                         "auto_truncate", "tokenization_workers", "version", "sha",
                         "docker_label"}


def test_a_route_exists_only_for_its_task(ours):
    with threaded_server(ours("fill-mask"), "tiny-mlm") as url:
        msg = refusal(post(url, "/embed", {"inputs": "a"}), 404, "Backend",
                      "fill-mask export", "feature-extraction")
        assert "/openapi.json" in msg
        refusal(httpx.get(url + "/info", timeout=30), 404, "Backend")
        assert post(url, "/tokenize", {"inputs": "the cat"}).status_code == 200
        paths = httpx.get(url + "/openapi.json", timeout=30).json()["paths"]
        assert "/tokenize" in paths and "/predict" in paths
        assert "/embed" not in paths and "/info" not in paths and "/v1/embeddings" not in paths
