"""The pipeline model on a real Triton: the tritonserver nvidia-pytriton bundles, spoken to with
tritonclient over HTTP and gRPC.

One server for the module serves every task's tiny export from one repository (written by
`export-triton --backend python`); a second, of `bertonnx serve --engine triton`, is killed with
SIGKILL: it leaves no stub process and no shared memory behind. Answers equal the library's (the
pipeline here, converted by the `tensors` bertonnx's /v2 route uses) within 1e-6: Triton merges
requests, and a merged batch may differ from a lone one by ~1e-7. Every wait has a guard. The
stub (Triton 2.51) needs numpy < 2: `make setup`'s .venv/triton-stub (runtime/triton/launch.py).
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime.core.errors import ConfigError
from bertonnx.runtime.core.tensors import HIDDEN
from bertonnx.runtime.server.process import announced_url
from bertonnx.runtime.triton.launch import Ports, TritonServer, check_platform
from bertonnx.runtime.triton.pipeline_repository import task_tensors, triton_dims
from bertonnx.runtime.triton.repository import TritonOptions, write_repository

from tests.conftest import cli_without

if importlib.util.find_spec("pytriton") is None:
    pytest.skip("nvidia-pytriton is not installed (make setup installs it where it can: Linux "
                "x86-64/aarch64 with glibc ≥ 2.35)", allow_module_level=True)
try:
    check_platform()
except ConfigError as e:
    pytest.skip(str(e), allow_module_level=True)

import tritonclient.grpc as tgrpc  # noqa: E402
import tritonclient.http as thttp  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

GUARD_S = 120.0
MERGE_WAIT_MS = 200.0   # the merging model's batching window: room for 32 clients to arrive
CONTEXT = ("the cat sat on the mat . the dog ran to the river in paris . "
           "london is a city with music and film .")
# per task: (inputs by tensor name, parameters) — texts of different lengths in one request
CASES = {
    "fill-mask": [({"text": ["the cat sat on the [MASK] .", "paris is a [MASK] ."]}, {}),
                  ({"text": ["the [MASK] ran to the river in paris ."]},
                   {"top_k": 2, "targets": "cat,dog"})],
    "text-classification": [({"text": ["what a film", "the music in london was awful"]}, {}),
                            ({"text": ["a cat", "a dog ran"], "text_pair": ["a dog", ""]},
                             {"function_to_apply": "sigmoid"})],
    "question-answering": [({"question": ["where did the dog run ?", "what is london ?"],
                             "context": [CONTEXT, CONTEXT]}, {}),
                           ({"question": ["what sat on the mat ?"], "context": [CONTEXT]},
                            {"max_answer_len": 3, "handle_impossible_answer": True})],
    "token-classification": [({"text": ["paris is a city with a river", "london music"]}, {}),
                             ({"text": ["paris is a city with a river"]},
                              {"aggregation_strategy": "simple", "ignore_labels": ""})],
    "feature-extraction": [({"text": ["the cat sat", "a dog ran to the river in paris"]}, {}),
                           ({"text": ["the cat sat"]}, {"pooling": "cls", "normalize": True})],
    "sparse-embedding": [({"text": ["the cat sat", "a dog ran to the river in paris"]}, {}),
                         ({"text": ["the cat sat"]}, {"top_k": 3, "return_tokens": True})],
    "text-ranking": [({"query": ["the cat", "paris"], "document": ["a cat", "a city"]}, {}),
                     ({"query": ["music"], "document": ["london music"]}, {"raw_scores": True})],
    "zero-shot-classification": [({"text": ["the cat", "a dog"]}, {"candidate_labels": "dog,cat"})],
}
TASKS = tuple(CASES)
MERGING = "merging"     # text-classification again, with a long batching window


def stub_python() -> str:
    """A Python the stub can run: this one if its numpy is older than 2, else the setup's."""
    if int(np.__version__.split(".")[0]) < 2:
        return sys.executable
    stub = Path(sys.prefix) / "triton-stub" / "bin" / "python"
    if not stub.exists():
        pytest.fail(f"{stub} is missing: run `make triton-stub` (make setup does)")
    return str(stub)


def _segments(prefix: str) -> list[str]:
    return sorted(p.name for p in Path("/dev/shm").glob(prefix + "*"))


def _stubs(shm_prefix: str) -> list[int]:
    """PIDs of the Python stubs of the server whose shared memory has this prefix."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"triton_python_backend_stub") and any(
                shm_prefix.encode() in a for a in argv):
            pids.append(int(proc.name))
    return pids


def until(check, what: str, timeout: float = GUARD_S):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return value


@pytest.fixture(scope="module")
def server(tiny_export, tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    repo = root / "models"
    for task in TASKS:
        write_repository(tiny_export(task), repo, TritonOptions(name=task, max_wait_ms=2,
                                                                threads=1))
    write_repository(tiny_export("text-classification"), repo, TritonOptions(
        name=MERGING, max_wait_ms=MERGE_WAIT_MS, threads=1, link=True))
    scratch = root / "scratch"
    scratch.mkdir()
    s = TritonServer(repo, scratch, Ports.choose("127.0.0.1", 0), python=stub_python(),
                     log=root / "tritonserver.log")
    s.start(GUARD_S)
    yield s
    assert s.stop() == 0, (root / "tritonserver.log").read_text()[-3000:]
    assert _stubs(s.shm_prefix) == [] and _segments(s.shm_prefix) == []


@pytest.fixture(scope="module")
def http(server):
    c = thttp.InferenceServerClient(f"127.0.0.1:{server.ports.http}", network_timeout=GUARD_S)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc(server):
    c = tgrpc.InferenceServerClient(f"127.0.0.1:{server.ports.grpc}")
    yield c
    c.close()


def request(module, inputs: dict[str, list[str]]) -> list:
    """Each input as a BYTES tensor of shape [N, 1], as the model's config declares."""
    out = []
    for name, texts in inputs.items():
        array = np.array(texts, dtype=object).reshape(-1, 1)
        tensor = module.InferInput(name, list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def library(pipe, inputs: dict[str, list[str]], params: dict) -> dict[str, np.ndarray]:
    """The library's answer as the task's tensors (a list parameter in its CLI spelling)."""
    spec = pipe.tensors
    params = {k: pipe.spec.parameters[k].flag.parse(v) if isinstance(v, str)
              and pipe.spec.parameters[k].flag.parse else v   # e.g. targets "a,b"
              for k, v in params.items()}
    return spec.write(pipe(spec.read(inputs, pipe), **params))


def assert_same(got, want: np.ndarray, datatype: str, name: str) -> None:
    got = got.reshape(want.shape)  # Triton's [N, 1] for bertonnx's [N]
    if datatype == "FP32":
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=name)
    elif datatype == "INT64":
        np.testing.assert_array_equal(got, want, err_msg=name)
    else:
        texts = [x.decode() for x in got.reshape(-1)]
        if name in ("entities", "sparse_embedding"):  # JSON with scores (weights) in it
            for g, w in zip(texts, want.reshape(-1)):
                close(json.loads(g), json.loads(w))
        else:
            assert texts == list(want.reshape(-1)), name


def close(got, want) -> None:
    """JSON values equal, their floats within 1e-6."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-6)
    elif isinstance(want, (list, dict)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in (zip(got, want) if isinstance(want, list) else
                     ((got[k], want[k]) for k in want)):
            close(g, w)
    else:
        assert got == want


# -- answers, metadata ------------------------------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_answers_equal_the_library_over_http_and_grpc(server, http, grpc, ours, task):
    pipe = ours(task)
    spec = task_tensors(task)
    for inputs, params in CASES[task]:
        want = library(pipe, inputs, params)
        for module, client in ((thttp, http), (tgrpc, grpc)):
            got = client.infer(task, request(module, inputs), parameters=params or None)
            for t in spec.outputs:
                assert_same(got.as_numpy(t.name), want[t.name], t.datatype, t.name)


@pytest.mark.parametrize("task", TASKS)
def test_metadata_is_the_tasks_tensors(http, grpc, ours, task):
    spec = task_tensors(task)
    width = np.asarray(ours("feature-extraction")("a cat")).shape[-1]
    meta = http.get_model_metadata(task)
    assert meta["platform"] == "python" and meta["versions"] == ["1"]
    for field, declared in (("inputs", spec.inputs), ("outputs", spec.outputs)):
        want = [{"name": t.name, "datatype": t.datatype,
                 "shape": [-1, *triton_dims(t, width)[0]]} for t in declared]
        assert meta[field] == want
        # bertonnx's own /v2 shapes, with Triton's [N, 1] for [N]
        assert [m["shape"] for m in want] == [
            [-1, *([width if d == HIDDEN else d for d in t.shape[1:]] or [1])] for t in declared]
    assert [i.name for i in grpc.get_model_metadata(task).inputs] == [t.name for t in spec.inputs]
    config = http.get_model_config(task)
    assert config["backend"] == "python" and config["max_batch_size"] == 32


# -- batching, errors ---------------------------------------------------------------------------

def _metric(server, name: str, model: str, least: float = 0.0) -> float:
    """A counter, read until ≥ `least`: a backend reports statistics after it responds."""
    url, deadline = f"http://127.0.0.1:{server.ports.metrics}/metrics", time.monotonic() + GUARD_S
    while True:
        with urllib.request.urlopen(url, timeout=GUARD_S) as r:
            value = next((float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                          if line.startswith(name + "{") and f'model="{model}"' in line), 0.0)
        if value >= least or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def test_concurrent_clients_are_merged(server, ours):
    """32 clients, one request each, at once: Triton's dynamic batcher hands them to the model
    in fewer executions than requests, and every client gets its own text's answer."""
    pipe = ours("text-classification")
    texts = [f"the cat sat on the mat {' and the dog ran' * (i % 5)}" for i in range(32)]
    want = library(pipe, {"text": texts}, {})
    count, execs = (_metric(server, m, MERGING) for m in ("nv_inference_count",
                                                          "nv_inference_exec_count"))
    start = threading.Barrier(len(texts))
    got, errors = [None] * len(texts), []

    def one(i):
        client = thttp.InferenceServerClient(f"127.0.0.1:{server.ports.http}",
                                             network_timeout=GUARD_S)  # gevent: one per thread
        try:
            start.wait(GUARD_S)
            r = client.infer(MERGING, request(thttp, {"text": [texts[i]]}))
            got[i] = (r.as_numpy("label").reshape(-1)[0].decode(), r.as_numpy("score"))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GUARD_S)
    assert not errors, errors
    assert [g[0] for g in got] == list(want["label"])
    np.testing.assert_allclose([float(g[1].reshape(-1)[0]) for g in got], want["score"],
                               rtol=0, atol=1e-6)
    assert _metric(server, "nv_inference_count", MERGING, count + 32) - count == 32
    assert 1 <= _metric(server, "nv_inference_exec_count", MERGING, execs + 1) - execs < 32


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_bad_requests_get_triton_errors_and_the_server_keeps_serving(http, grpc, transport):
    client, module = (http, thttp) if transport == "http" else (grpc, tgrpc)
    bad = [
        ("text-classification", {"text": ["fine"]}, {"top_k": 2}, "unknown parameters ['top_k']"),
        ("text-classification", {"text": ["fine"]}, {"function_to_apply": "cube"},
         "function_to_apply must be"),
        ("text-classification", {"text": ["fine", " "]}, {}, "empty"),
        ("fill-mask", {"text": ["no mask here"]}, {}, "no mask token"),
        ("fill-mask", {"text": ["the [MASK] sat on the [MASK]"]}, {}, "2 [MASK] tokens"),
        ("question-answering", {"question": ["what ?"]}, {},   # Triton's own check
         "missing required input(s) ['context']"),
        ("feature-extraction", {"text": ["a cat"]}, {"pooling": "none"}, "pooling")]
    for model, inputs, params, message in bad:
        with pytest.raises(InferenceServerException) as e:
            client.infer(model, request(module, inputs), parameters=params or None)
        assert message in e.value.message(), e.value.message()
    with pytest.raises(InferenceServerException):   # Triton's own check: an unknown input
        client.infer("text-classification", request(module, {"txt": ["a"]}))
    # not UTF-8
    raw = module.InferInput("text", [1, 1], "BYTES")
    raw.set_data_from_numpy(np.array([[b"\xff\xfe cat"]], dtype=object))
    with pytest.raises(InferenceServerException, match="not UTF-8"):
        client.infer("text-classification", [raw])
    r = client.infer("text-classification", request(module, {"text": ["still serving"]}))
    assert r.as_numpy("label").shape == (1, 1)


def test_a_bad_request_merged_with_good_ones_fails_alone(server, ours):
    """Requests batched together: the one with the bad text gets the error, the others their
    answers."""
    pipe = ours("text-classification")
    texts = ["a cat sat", "", "a dog ran to the river"]
    start = threading.Barrier(len(texts))
    outcomes = [None] * len(texts)

    def one(i):
        client = thttp.InferenceServerClient(f"127.0.0.1:{server.ports.http}",
                                             network_timeout=GUARD_S)
        try:
            start.wait(GUARD_S)
            r = client.infer(MERGING, request(thttp, {"text": [texts[i]]}))
            outcomes[i] = r.as_numpy("label").reshape(-1)[0].decode()
        except InferenceServerException as e:
            outcomes[i] = e
        finally:
            client.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GUARD_S)
    assert isinstance(outcomes[1], InferenceServerException) and "empty" in outcomes[1].message()
    assert [outcomes[0], outcomes[2]] == [r["label"] for r in pipe([texts[0], texts[2]])]


# -- `bertonnx serve --engine triton` -----------------------------------------------------------

def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_serve_engine_triton_then_kill_9(tiny_export):
    """The one command: announced once ready, answers raw text; tritonserver killed with
    SIGKILL takes its stubs and shared memory with it, and the command exits non-zero and
    removes its scratch repository."""
    export = tiny_export("token-classification")
    argv = [sys.executable, "-m", "bertonnx.runtime.cli", "serve", str(export), "--engine",
            "triton", "--port", "0", "--name", "ner", "--triton-python", stub_python(),
            "--instances", "2", "--max-batch-size", "8"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        url = until(lambda: (line := proc.stderr.readline()) and (
            lines.append(line) or announced_url(line)) or proc.poll() is not None,
            "no announcement")
        assert isinstance(url, str), "".join(lines) + proc.stderr.read()
        client = thttp.InferenceServerClient(url.removeprefix("http://"), network_timeout=60)
        r = client.infer("ner", request(thttp, {"text": ["paris is a city"]}))
        assert json.loads(r.as_numpy("entities").reshape(-1)[0]) is not None
        assert client.get_model_config("ner")["instance_group"][0]["count"] == 2
        client.close()
        (triton,) = _children(proc.pid)
        argv_of = Path(f"/proc/{triton}/cmdline").read_bytes().split(b"\0")
        assert argv_of[0].endswith(b"tritonserver")
        repo = next(a for a in argv_of if a.startswith(b"--model-repository="))
        repo = Path(repo.split(b"=", 1)[1].decode())
        prefix = next(a for a in argv_of if b"shm-region-prefix-name=" in a)
        prefix = prefix.split(b"=")[-1].decode()
        stubs = _stubs(prefix)   # in tritonserver's process group, which serve ends with it
        pg = {int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[2]) for p in stubs}
        assert len(stubs) == 2 and _segments(prefix) and pg == {triton}
        os.kill(triton, signal.SIGKILL)
        until(lambda: proc.poll() is not None, "serve did not exit after tritonserver died")
        assert proc.returncode == 1
        until(lambda: not _stubs(prefix), "stub processes outlived serve")   # it ended them
        assert _segments(prefix) == [] and not repo.exists()
        assert "Traceback" not in "".join(lines) + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_engine_triton_refusals(tiny_export, tmp_path):
    export = str(tiny_export("fill-mask"))
    done = cli_without(("pytriton",), "serve", export, "--engine", "triton")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "triton extra" in done.stderr
    done = cli_without((), "serve", export, "--engine", "triton", "--triton-python",
                       str(tmp_path / "no-python"))
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0
    assert "cannot run the stub's Python" in done.stderr
    done = cli_without((), "serve", export, "--instances", "2")
    assert done.returncode == 2 and "--instances needs --engine triton" in done.stderr
    done = cli_without((), "serve", export, "--engine", "triton", "--workers", "2")
    assert done.returncode == 2 and "--workers does not apply with --engine triton" in done.stderr
