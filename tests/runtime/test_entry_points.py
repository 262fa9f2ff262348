"""One answer per question (issue 31): every entry point gives the library's answer on the same
export and inputs — parameters left out (each at the export's default) and, for embeddings,
`normalize` set under the same name everywhere.

The entry points: `load(DIR)(inputs)`; the task's command with `--json` and an --input file;
POST /predict, /v2 (the real `tritonclient.http`) and, for embeddings, /v1/embeddings (the
real `openai` client) on the server app (uvicorn in a thread, tests/runtime/_threaded_server);
`bertonnx run` on a JSONL file; and the Ray Data `Predictor` (no cluster: it is the callable
each actor runs; `run --ray` hands its actors the local job's parameters). Exports are fp32:
answers agree within 1e-5 (a batch of several pads rows to another length than one alone).

An export of a sentence-transformers folder defaults to the folder's own pooling and normalize
(its modules.json, recorded in the manifest at export): every entry point gives those too.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.tasks import SAME, TASKS

from tests.conftest import CLS, EMB, FM, NER, QA

RANK, ZS = "text-ranking", "zero-shot-classification"
from tests.runtime._compare import assert_same
from tests.runtime._threaded_server import threaded_server
from tests.runtime.core.pipelines.test_sentence_folders import CLASSIC_CLS, st_folder

triton = pytest.importorskip("tritonclient.http")
openai = pytest.importorskip("openai")
pa = pytest.importorskip("pyarrow")

ATOL = 1e-5
CONTEXT = ("the cat sat on the mat . the dog ran to the river in paris . "
           "london is a city with music and film .")
# task -> the same inputs for every entry point (a list: one answer per input)
INPUTS = {
    FM: ["the cat [MASK] on the mat .", "paris is a [MASK] ."],
    CLS: ["the cat sat on the mat", "happy music"],
    QA: [{"question": "where did the dog run ?", "context": CONTEXT},
         {"question": "what is london ?", "context": CONTEXT}],
    NER: ["paris is a city with a river", "london music"],
    EMB: ["the cat sat", "a dog ran to the river in paris"],
    "sparse-embedding": ["the cat sat", "a dog ran to the river in paris"],
    RANK: [{"query": "where did the dog run ?", "documents": ["the dog ran to the river",
                                                             "a cat sat", "paris is a city"]},
           {"query": "music", "documents": ["london music and film", "the mat"]}],
    ZS: ["the cat sat on the mat", "london is a city with music"],
}
# what a task cannot be called without (zero-shot's labels), on every entry point alike
NEEDS = {ZS: {"candidate_labels": "music,city,cat"}}


@pytest.fixture(scope="module")
def dot_product_export(tiny_checkpoint, tmp_path_factory):
    """A sentence-transformers folder with CLS pooling and no Normalize module (a model trained
    for dot products, whose vector lengths carry meaning), exported."""
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    root = tmp_path_factory.mktemp("st")
    src = st_folder(tiny_checkpoint(EMB), root / "src", ["Transformer", "Pooling"], CLASSIC_CLS)
    export_model(src, EMB, root / "out", ExportOptions(parity=False))
    return root / "out"


# -- each entry point's answer -----------------------------------------------------------------


def flags(params: dict) -> list[str]:
    """The command line's spelling of `params` (the record's flags)."""
    out = []
    for name, value in params.items():
        option = "--" + name.replace("_", "-")
        out += ([option if value else "--no-" + option[2:]] if isinstance(value, bool)
                else [option, str(value)])
    return out


def write_jsonl(path: Path, items: list, as_rows: bool) -> Path:
    rows = [i if isinstance(i, dict) else ({"text": i} if as_rows else i) for i in items]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def cli(capsys, task: str, folder: Path, items: list, params: dict, tmp: Path):
    src = write_jsonl(tmp / "cli.jsonl", items, as_rows=False)
    rc = main([TASKS[task].command, str(folder), "--input", str(src), "--json", *flags(params)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def bulk(capsys, folder: Path, items: list, params: dict, tmp: Path) -> list:
    src = write_jsonl(tmp / "bulk.jsonl", items, as_rows=True)
    out = tmp / "bulk-out.jsonl"
    rc = main(["run", str(folder), "--input", str(src), "--output", str(out), "--no-progress",
               "--force", *flags(params)])
    _, err = capsys.readouterr()
    assert rc == 0, err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all("error" not in r for r in rows), rows
    return [r["result"] for r in rows]


def ray_predictor(folder: Path, items: list, params: dict) -> list:
    from bertonnx.runtime.bulk.ray import Predictor

    rows = [i if isinstance(i, dict) else {"text": i} for i in items]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    out = Predictor(str(folder), params or None)(table)
    assert out["error"].to_pylist() == [None] * len(rows)
    return [r if isinstance(r, list) else json.loads(r) for r in out["result"].to_pylist()]


def v2(url: str, pipe, items: list, params: dict) -> dict[str, np.ndarray]:
    client = triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=60)
    try:
        names = [t.name for t in pipe.tensors.inputs if not t.optional]
        tensors = []
        for name in names:
            column = np.array([i[name] if isinstance(i, dict) else i for i in items],
                              dtype=object)
            tensor = triton.InferInput(name, list(column.shape), "BYTES")
            tensors.append(tensor.set_data_from_numpy(column, binary_data=False))
        got = client.infer("m", tensors, parameters=params or None)
        return {t.name: got.as_numpy(t.name) for t in pipe.tensors.outputs}
    finally:
        client.close()


def assert_tensors(got: dict, want: dict, where: str) -> None:
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, (where, name, g.shape, w.shape)
        if w.dtype == object:   # BYTES: strings, or token-classification's JSON entities
            g = [x.decode() if isinstance(x, bytes) else x for x in g.reshape(-1)]
            w = [x.decode() if isinstance(x, bytes) else x for x in w.reshape(-1)]
            if name in ("entities", "sparse_embedding"):   # JSON: numbers within ATOL
                assert_same([json.loads(x) for x in g], [json.loads(x) for x in w], ATOL, where)
            else:
                assert g == w, (where, name)
        elif w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=0, atol=ATOL, err_msg=f"{where} {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{where} {name}")


# -- the tests ---------------------------------------------------------------------------------

CASES = [(task, "plain", NEEDS.get(task, {})) for task in INPUTS] + [
    (EMB, "plain", {"normalize": False}),   # the other choice, under the same name everywhere
    (EMB, "st", {}),                        # the folder's own choice: cls pooling, raw vectors
    (EMB, "st", {"normalize": True}),
    ("sparse-embedding", "plain", {"top_k": 3, "return_tokens": True}),
]


@pytest.mark.parametrize("task, export, params", CASES,
                         ids=[f"{t}-{e}-{','.join(f'{k}={v}' for k, v in p.items()) or 'defaults'}"
                              for t, e, p in CASES])
def test_every_entry_point_gives_the_librarys_answer(capsys, tmp_path, tiny_export,
                                                     dot_product_export, task, export, params):
    folder = dot_product_export if export == "st" else tiny_export(task)
    items = INPUTS[task]
    pipe = load(folder)
    want = pipe(items, **params)
    differ = []   # every entry point that disagrees, not only the first

    def check(where: str, got, tensors: bool = False) -> None:
        try:
            if tensors:
                assert_tensors(got, pipe.tensors.write(want), where)
            else:
                assert_same(got, want, ATOL, where)
        except AssertionError as e:
            differ.append(f"{where}: {' '.join(str(e).split())[:300]}")

    check("cli --json", cli(capsys, task, folder, items, params, tmp_path))
    check("bulk run", bulk(capsys, folder, items, params, tmp_path))
    check("ray Predictor", ray_predictor(folder, items, params))
    with threaded_server(pipe, "m") as url:
        r = httpx.post(url + "/predict", json={"inputs": items, "parameters": params},
                       timeout=60)
        assert r.status_code == 200, r.text
        check("/predict", r.json())
        if task == RANK:   # a /v2 row is one (query, document) pair, scored alone
            pairs = [{"query": i["query"], "document": d} for i in items for d in i["documents"]]
            want = pipe([{"query": p["query"], "documents": [p["document"]]} for p in pairs],
                        **params)
            items = pairs
        check("/v2", v2(url, pipe, items, params), tensors=True)
        if TASKS[task].vector_output and not params:
            with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as c:
                got = c.embeddings.create(input=items, model="m")
            check("/v1/embeddings", [d.embedding for d in got.data])
    assert not differ, "answers other than load()'s:\n" + "\n".join(differ)


def test_embeddings_are_unit_vectors_unless_the_folder_chose_otherwise(tiny_export,
                                                                       dot_product_export):
    texts = INPUTS[EMB]
    plain, st = load(tiny_export(EMB)), load(dot_product_export)
    norms = np.linalg.norm(plain(texts, return_tensors=True), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)
    assert dict(st.folder.manifest.defaults) == {"normalize": False, "pooling": "cls"}
    # the same weights: the folder's choice is exactly those two parameters
    np.testing.assert_allclose(st(texts, return_tensors=True),
                               plain(texts, pooling="cls", normalize=False, return_tensors=True),
                               rtol=0, atol=ATOL)
    assert not np.allclose(np.linalg.norm(st(texts, return_tensors=True), axis=1), 1.0)
    # token vectors (pooling "none") are left as they are, as before
    tokens = plain(texts[0], pooling="none")
    assert np.asarray(tokens).shape[:2] == (1, len(plain.tokenizer.encode(texts[0]).ids))


@pytest.mark.parametrize("task", list(INPUTS))
def test_a_cli_default_spelled_out_answers_as_the_option_left_out(capsys, tmp_path, tiny_export,
                                                                   task):
    """Where the command line shows a default of its own spelling (function_to_apply
    "default", ignore_labels "O"), passing it changes nothing."""
    folder = tiny_export(task)
    left_out = cli(capsys, task, folder, INPUTS[task], NEEDS.get(task, {}), tmp_path)
    for p in TASKS[task].params:
        if p.flag is None or p.flag.default is SAME or p.flag.default is None:
            continue
        spelled = cli(capsys, task, folder, INPUTS[task],
                      {**NEEDS.get(task, {}), p.name: p.flag.default}, tmp_path)
        assert_same(spelled, left_out, 0.0, p.option)
