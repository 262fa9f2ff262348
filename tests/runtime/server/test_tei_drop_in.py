"""TEI as a drop-in on the base URL (issue 43 item 4), on a real server (uvicorn in a thread,
tiny exports): huggingface_hub's InferenceClient given only the base URL — how LangChain and
LlamaIndex configure TEI — embeds, compares sentences, classifies with top_k and fills masks
with the library's answers; POST / and /invocations dispatch by the export's task as TEI's
router does; TEI's /predict, /similarity, /embed_all and /decode in TEI's shapes; /predict's
own convention unchanged for today's clients; /info and /openapi.json true to what is served.
"""
from __future__ import annotations

import httpx
import numpy as np
import pytest

from bertonnx.runtime.server import Limits, ServeOptions

from tests.conftest import CLS, EMB, FM
from tests.runtime._threaded_server import threaded_server

TEXTS = ["the cat sat on the mat", "a dog ran to the river in paris", "music"]
LIMITS = Limits(max_inputs=4, max_tokens=200, max_body_bytes=20_000)


@pytest.fixture(scope="module")
def servers(ours):
    """task -> (base URL, the library's pipeline) of a served tiny export."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        yield {task: (stack.enter_context(threaded_server(
            ours(task), f"tiny-{task}", ServeOptions(name=f"tiny-{task}", limits=LIMITS))),
            ours(task)) for task in (EMB, CLS, FM)}


def post(url, path, body) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def tei_error(response, status: int, *words: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}, body
    assert all(w in body["error"] for w in words), body
    return body


def cosines(pipe, source: str, others: list[str]) -> np.ndarray:
    v = np.float32(pipe([source, *others], normalize=False))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v[1:] @ v[0]


def test_inference_client_on_an_embedding_export(servers, hf_hub_online):
    url, pipe = servers[EMB]
    client = hf_hub_online.InferenceClient(base_url=url)
    got = client.feature_extraction(TEXTS[0])
    np.testing.assert_array_equal(got, np.float32([pipe(TEXTS[0])]))
    raw = client.feature_extraction(TEXTS[1], normalize=False, truncate=True)
    np.testing.assert_array_equal(raw, np.float32([pipe(TEXTS[1], normalize=False)]))
    similar = client.sentence_similarity(TEXTS[0], other_sentences=TEXTS[1:])
    np.testing.assert_allclose(similar, cosines(pipe, TEXTS[0], TEXTS[1:]), atol=1e-6)
    # SageMaker's route is the same dispatch
    np.testing.assert_array_equal(np.float32(post(url, "/invocations", {"inputs": TEXTS}).json()),
                                  np.float32(pipe(TEXTS)))


def test_inference_client_classifies_with_top_k(servers, hf_hub_online):
    url, pipe = servers[CLS]
    client = hf_hub_online.InferenceClient(base_url=url)
    top = client.text_classification(TEXTS[0], top_k=2)
    assert [(e.label, e.score) for e in top] == [
        (r["label"], pytest.approx(r["score"], abs=1e-6)) for r in pipe(TEXTS[0], top_k=2)]
    every = client.text_classification(TEXTS[0])   # every label, best first
    assert [e.label for e in every] == [r["label"] for r in pipe(TEXTS[0], top_k=None)]
    assert len(every) == 3


def test_inference_client_fills_masks(servers, hf_hub_online):
    url, pipe = servers[FM]
    client = hf_hub_online.InferenceClient(base_url=url)
    got = client.fill_mask("the cat [MASK] on the mat .", top_k=3)
    want = pipe("the cat [MASK] on the mat .", top_k=3)
    assert [(e.token_str, e.sequence) for e in got] == [(w["token_str"], w["sequence"])
                                                        for w in want]


def tei_order(results: list[dict], labels: list[str]) -> list[dict]:
    return [{"score": r["score"], "label": r["label"]} for r in sorted(
        results, key=lambda r: (r["score"], labels.index(r["label"])), reverse=True)]


def test_tei_predict_on_the_base_url_and_on_predict(servers):
    url, pipe = servers[CLS]
    labels = list(pipe.labels)
    every = pipe(TEXTS[0], top_k=None)
    # POST /: TEI's PredictRequest; a single text gives one flat list, every label best first
    assert post(url, "/", {"inputs": TEXTS[0]}).json() == tei_order(every, labels)
    # ["a", "b"] is a pair in TEI's reading; a batch is a list of lists
    pair = pipe({"text": TEXTS[0], "text_pair": TEXTS[1]}, top_k=None)
    assert post(url, "/", {"inputs": TEXTS[:2]}).json() == tei_order(pair, labels)
    batch = post(url, "/invocations", {"inputs": [[TEXTS[2]], TEXTS[:2]]}).json()
    assert batch == [tei_order(pipe(TEXTS[2], top_k=None), labels), tei_order(pair, labels)]
    raw = post(url, "/", {"inputs": TEXTS[0], "raw_scores": True}).json()
    assert raw == tei_order(pipe(TEXTS[0], top_k=None, function_to_apply="none"), labels)
    # /predict: TEI's answer once the body holds one of TEI's fields
    assert post(url, "/predict", {"inputs": TEXTS[0], "raw_scores": False}).json() == \
        tei_order(every, labels)
    assert post(url, "/predict", {"inputs": TEXTS[:2], "truncate": True}).json() == \
        tei_order(pair, labels)
    # ... and today's convention otherwise: the pipeline's answer, a list being inputs
    assert post(url, "/predict", {"inputs": TEXTS[0]}).json() == pipe(TEXTS[0])
    assert post(url, "/predict", {"inputs": TEXTS[:2]}).json() == pipe(TEXTS[:2])
    assert post(url, "/predict", {"inputs": TEXTS[0], "parameters": {"top_k": 2}}).json() == \
        pipe(TEXTS[0], top_k=2)
    # refusals: TEI's on /, /predict's own shape on /predict
    long = " ".join(["music"] * 80)
    tei_error(post(url, "/", {"inputs": long, "truncate": False}), 422, "less than 64 tokens")
    tei_error(post(url, "/", {"inputs": "a", "truncation_direction": "Left"}), 422, "Left")
    tei_error(post(url, "/", {"inputs": [["a", "b", "c"]]}), 422, "a pair of strings")
    tei_error(post(url, "/", {"inputs": [["a"]] * 5}), 422, "batch size 5 > maximum allowed")
    r = post(url, "/predict", {"inputs": "a", "truncation_direction": "Left"})
    assert r.status_code == 422 and set(r.json()) == {"error", "type"}, r.text
    assert post(url, "/predict", {"inputs": "a", "raw_scores": True,
                                  "parameters": {}}).status_code == 400   # not both
    info = httpx.get(url + "/info", timeout=30).json()
    assert info["model_type"] == {"classifier": {
        "id2label": {str(i): n for i, n in enumerate(labels)},
        "label2id": {n: i for i, n in enumerate(labels)}}}


def test_similarity_embed_all_and_decode(servers):
    url, pipe = servers[EMB]
    body = {"inputs": {"source_sentence": TEXTS[0], "sentences": TEXTS[1:]}}
    np.testing.assert_allclose(post(url, "/similarity", body).json(),
                               cosines(pipe, TEXTS[0], TEXTS[1:]), atol=1e-6)
    # POST / reads the same body as /similarity (TEI needs TASK=sentence-similarity for it)
    assert post(url, "/", body).json() == post(url, "/similarity", body).json()
    tei_error(post(url, "/similarity", {"inputs": {"source_sentence": "a", "sentences": []}}),
              400, "cannot be empty")
    tei_error(post(url, "/similarity", {"inputs": {"source_sentence": "a",
                                                   "sentences": ["b"] * 4}}),
              422, "batch size 5 > maximum allowed batch size 4")
    tokens = post(url, "/embed_all", {"inputs": TEXTS[:2]}).json()
    for text, got in zip(TEXTS[:2], tokens):
        want = np.float32(pipe(text, pooling="none", normalize=False))[0]
        assert np.float32(got).shape == want.shape == (len(pipe.tokenizer.backend.encode(
            text).ids), 32)
        np.testing.assert_allclose(np.float32(got), want, atol=1e-5)
    assert np.float32(post(url, "/embed_all", {"inputs": TEXTS[2]}).json()).ndim == 3
    ids = [[t["id"] for t in row] for row in post(url, "/tokenize", {"inputs": TEXTS[:2]}).json()]
    assert post(url, "/decode", {"ids": ids}).json() == [pipe.tokenizer.decode(i) for i in ids]
    assert post(url, "/decode", {"ids": ids[:1]}).json() == [TEXTS[0]]
    assert post(url, "/decode", {"ids": ids[0], "skip_special_tokens": False}).json() == [
        pipe.tokenizer.decode(ids[0], skip_special_tokens=False)]
    assert post(url, "/decode", {"ids": []}).json() == [""]
    tei_error(post(url, "/decode", {"ids": [10 ** 9]}), 422, "token ids")
    tei_error(post(url, "/decode", {"ids": [[1]] * 5}), 422, "batch size 5")


def test_routes_by_task_and_the_document(servers):
    url = servers[EMB][0]
    paths = httpx.get(url + "/openapi.json", timeout=30).json()["paths"]
    assert {"/", "/invocations", "/similarity", "/embed_all", "/decode"} <= set(paths)
    url, pipe = servers[FM]
    paths = httpx.get(url + "/openapi.json", timeout=30).json()["paths"]
    assert {"/", "/invocations", "/decode"} <= set(paths)
    assert not {"/similarity", "/embed_all"} & set(paths)
    tei_error(post(url, "/embed_all", {"inputs": "a"}), 404, "feature-extraction")
    # the tasks TEI lacks answer /predict's way on the base URL
    assert post(url, "/", {"inputs": "the [MASK] sat ."}).json() == pipe("the [MASK] sat .")
    url = servers[CLS][0]
    predict = httpx.get(url + "/openapi.json", timeout=30).json()["paths"]["/predict"]["post"]
    fields = predict["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert {"inputs", "parameters", "raw_scores", "truncate"} <= set(fields)
    assert "422" in predict["responses"]


def test_info_is_true_to_what_is_served(ours):
    """/info's kind is one whose TEI routes the export answers: a zero-shot export (candidate
    labels, which TEI's /predict cannot send) is none; its dtype is the engine's arithmetic."""
    from types import SimpleNamespace as NS

    from bertonnx.runtime.server.tei import model_dtype

    pipe = ours("zero-shot-classification")
    with threaded_server(pipe, "tiny-nli") as url:
        tei_error(httpx.get(url + "/info", timeout=30), 404)
        body = {"inputs": TEXTS[0], "parameters": {"candidate_labels": ["cat", "music"]}}
        assert post(url, "/", body).json() == pipe(TEXTS[0], candidate_labels=["cat", "music"])

    def served(mode, precision):
        return NS(folder=NS(manifest=NS(quantization={"mode": mode})),
                  session=NS(config=NS(precision=precision)))

    assert model_dtype(served("none", "bf16")) == "bfloat16"   # OpenVINO bf16 on an fp32 graph
    assert model_dtype(served("none", "f32")) == "float32"
    assert model_dtype(served("int8", "bf16")) == "int8"
