"""`bertonnx serve DIR --ray ADDRESS`: the server app as a Ray Serve deployment.

The cluster tests start their own one-node Ray cluster (tests/runtime/_ray_cluster.py: `ray
start --head` on 127.0.0.1, every port its own, a small object store) and stop it in a
finalizer whatever happens: its own processes are killed by pid — never `ray stop`, which
would stop every cluster on the machine. The in-process tests (the
ingress's retries, the relay, the flags) need no cluster; the extra's absence needs no ray.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bertonnx.runtime.cli import main
from bertonnx.runtime.core.errors import ArtifactError, ConfigError, InputError
from bertonnx.runtime.ray.cluster import join
from bertonnx.runtime.server import RayOptions, ServeOptions, create_app
from bertonnx.runtime.server.relay import HttpRequest, HttpResponse, Lifespan, exchange

from tests.live_server import LiveServer
from tests.runtime._engines import NO_OPENVINO, OPENVINO
from tests.runtime._ray_cluster import ENV, LocalCluster
from tests.runtime.server._helpers import BATCHED_ATOL, EchoPipeline, assert_close, jsonable

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="needs the ray extra (pip install 'bertonnx[ray]')")

TEXTS = ["happy music", "the dog ran to the river", "sad film", "paris is a city",
         "the cat sat on the mat", "london music and film", "a house with water", "one"]


# -- a cluster of our own ----------------------------------------------------------------------


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _replica_pids(cluster: LocalCluster) -> set[int]:
    return {pid for pid in cluster.pids()
            if _cmdline(pid).startswith(b"ray::ServeReplica:bertonnx:model")}


def _serve_status(cluster: LocalCluster, until_running: int, timeout: float = 90) -> dict:
    """Serve's replica states of the app's model deployment, polled (bounded) until
    `until_running` replicas run."""
    code = ("import json, sys, time, ray; from ray import serve\n"
            f"ray.init(address={cluster.address!r}, logging_level='ERROR')\n"
            f"deadline = time.monotonic() + {timeout}\n"
            "while True:\n"
            "    app = serve.status().applications.get('bertonnx')\n"
            "    states = dict(app.deployments['model'].replica_states) if app else {}\n"
            f"    if states.get('RUNNING', 0) == {until_running} and len(states) <= 1 \\\n"
            "            or time.monotonic() > deadline:\n"
            "        break\n"
            "    time.sleep(0.5)\n"
            "print(json.dumps({str(k): v for k, v in states.items()}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout + 60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # a short root: Ray's unix socket paths must fit in 107 bytes
    root = Path(tmp_path_factory.mktemp("rc", numbered=True))
    with pytest.MonkeyPatch.context() as env:
        # this cluster's clients (the server under test, the status probe) inherit ENV too
        for k, v in ENV.items():
            env.setenv(k, v)
        c = LocalCluster(root)
        try:
            # 4 logical CPUs: 2 replicas and a replacement fit while the killed one goes
            c.start_head(cpus=4)
            yield c
        finally:
            c.stop()


# -- the tests ---------------------------------------------------------------------------------


@needs_ray
def test_two_replicas_answer_like_the_library_and_survive_a_killed_replica(
        cluster, tiny_export, ours):
    """2 replicas behind Ray Serve: every route passes through, answers equal the library's;
    one replica's process is killed under a bounded load (200 requests of 64 texts, 8
    clients, killed once 60 are answered): each request is answered correctly or with a clean
    503 (≤ 1%), none hangs (client timeouts are bounded), and Serve brings the replica count
    back. 64 texts in parts of 4 keep each request inside a replica for most of its life, so
    the kill finds requests there (the ones the ingress re-sends)."""
    pipe = ours("text-classification")
    with LiveServer.serve(tiny_export("text-classification"), "--ray", cluster.address,
                       "--replicas", "2", "--max-batch-size", "4",
                       ready_timeout=120) as server:
        # every route of the app, through the ingress
        assert httpx.get(server.url + "/health", timeout=30).json() == \
            {"status": "ok", "task": "text-classification"}
        for inputs, params in [(TEXTS[0], {}), (TEXTS[:3], {"top_k": 2}),
                               ({"text": "the dog ran", "text_pair": "to the river"}, {})]:
            r = httpx.post(server.url + "/predict", json={"inputs": inputs,
                                                          "parameters": params}, timeout=30)
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            assert r.json() == jsonable(pipe(inputs, **params))
        r = httpx.post(server.url + "/predict?x=1", json={"inputs": ""}, timeout=30)
        assert r.status_code == 400 and r.json()["type"] == "InputError"
        r = httpx.post(server.url + "/predict", content=b'{"inputs": "x"' + b" " * (1 << 20),
                       timeout=30)
        assert r.status_code == 413 and r.json()["type"] == "PayloadTooLarge"
        assert httpx.get(server.url + "/nope", timeout=30).status_code == 404
        assert "bertonnx_model_ready 1" in httpx.get(server.url + "/metrics", timeout=30).text

        before = _replica_pids(cluster)
        assert len(before) == 2
        n, clients, kill_at = 200, 8, 60
        load = {i: (TEXTS[i:] + TEXTS[:i]) * 8 for i in range(8)}
        want = {i: jsonable(pipe(texts)) for i, texts in load.items()}
        outcomes: list[tuple[int, int, object]] = []   # (request, status, body or error)
        lock, killed = threading.Lock(), []
        local, opened = threading.local(), []

        def one(i: int):
            if not hasattr(local, "client"):
                local.client = httpx.Client(timeout=60)   # bounded: a hang fails the test
                opened.append(local.client)
            client = local.client
            try:
                r = client.post(server.url + "/predict", json={"inputs": load[i % 8]})
                outcome = (i, r.status_code, r.json(), r.headers.get("x-bertonnx-attempts"))
            except Exception as e:  # noqa: BLE001 — recorded, asserted on below
                outcome = (i, -1, repr(e), None)
            with lock:
                outcomes.append(outcome)
                if len(outcomes) == kill_at and not killed:
                    victim = min(before)
                    os.kill(victim, signal.SIGKILL)
                    killed.append(victim)

        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(n)))
        for client in opened:
            client.close()

        assert killed and len(outcomes) == n
        hung = [o for o in outcomes if o[1] == -1]
        assert not hung, hung[:3]
        refused = [o for o in outcomes if o[1] == 503]
        for i, status, body, _ in outcomes:
            if status == 200:
                assert_close(body, want[i % 8], BATCHED_ATOL)
            else:
                assert status == 503 and set(body) == {"error", "type"}, (status, body)
        assert len(refused) <= n // 100, refused
        retried = sum(1 for o in outcomes if o[3])
        print(f"\nray kill: {n} requests, {len(refused)} answered 503, {retried} re-sent")

        # Serve replaced the killed replica: a new replica process, then two running
        deadline = time.monotonic() + 90
        while not _replica_pids(cluster) - before and time.monotonic() < deadline:
            time.sleep(0.2)
        after = _replica_pids(cluster)
        assert killed[0] not in after and len(after - before) == 1, (before, after)
        assert _serve_status(cluster, until_running=2) == {"RUNNING": 2}
        for inputs in TEXTS:
            r = httpx.post(server.url + "/predict", json={"inputs": inputs}, timeout=30)
            assert r.status_code == 200 and r.json() == jsonable(pipe(inputs))
        assert server.terminate() == 0, server.log


@needs_ray
@pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
def test_a_replica_runs_the_engine_asked_for(cluster, tiny_export):
    """`serve --ray --providers openvino:f32`: the replica loads the export on OpenVINO and
    answers as the CPU provider does within the fp32 tolerance (issue 41 item 1)."""
    import numpy as np

    from bertonnx.runtime import load

    folder = tiny_export("feature-extraction")
    want = np.asarray(load(folder, providers="cpu")(TEXTS, normalize=True))
    with LiveServer.serve(folder, "--ray", cluster.address, "--replicas", "1",
                          "--providers", "openvino:f32", ready_timeout=120) as server:
        r = httpx.post(server.url + "/embed", json={"inputs": TEXTS}, timeout=30)
        assert r.status_code == 200, r.text
        assert np.abs(np.asarray(r.json()) - want).max() <= 1e-4
        metrics = httpx.get(server.url + "/metrics", timeout=30).text
        assert 'bertonnx_engine_info{engine="openvino",precision="f32"} 1' in metrics
        # a clean stop takes its application and the Serve it started away, as the next
        # test (which starts its own) needs
        assert server.terminate() == 0, server.log


@needs_ray
def test_a_replica_serves_several_models(cluster, tiny_export, ours):
    """`serve A B --ray`: one replica holds both, routed by `model` or by the route's task."""
    embedder, ranker = tiny_export("feature-extraction"), tiny_export("text-ranking")
    with LiveServer.serve(embedder, ranker, "--name", "e", "--name", "r", "--ray",
                          cluster.address, "--replicas", "1", ready_timeout=120) as server:
        r = httpx.post(server.url + "/embed", json={"inputs": TEXTS, "model": "e"}, timeout=30)
        assert_close(r.json(), jsonable(ours("feature-extraction")(TEXTS)), 1e-6)
        r = httpx.post(server.url + "/rerank", json={"query": "a", "texts": TEXTS}, timeout=30)
        assert [x["index"] for x in r.json()] == [w["corpus_id"] for w in
                                                  ours("text-ranking")("a", TEXTS)]
        assert server.terminate() == 0, server.log


def test_replicas_that_fit_nowhere_are_one_line_not_a_wait(cluster, tiny_export):
    """More CPUs per replica than the cluster has: the command stops within
    --deploy-timeout-s with one line naming what it asked and what the cluster has, and
    takes its application (and the Serve it started) away."""
    out = subprocess.run(
        [sys.executable, "-m", "bertonnx.runtime.cli", "serve",
         str(tiny_export("text-classification")), "--ray", cluster.address, "--port", "0",
         # the drain bounds the clean-up: Serve waits that long for a replica never placed
         "--replica-cpus", "64", "--deploy-timeout-s", "3", "--drain-timeout-s", "1"],
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 2, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("bertonnx: error: the model replicas did not start within 3 s "
                           "(--deploy-timeout-s): 1 × 64 CPUs asked (--replica-cpus), the "
                           "cluster has 4"), out.stderr[-3000:]
    assert _serve_status(cluster, until_running=0, timeout=1) == {}


class _Handle:
    """A stand-in for a DeploymentHandle: `remote` answers with the next scripted outcome."""

    def __init__(self, *outcomes):
        self.outcomes, self.calls = list(outcomes), 0

    def remote(self, record):
        self.calls += 1
        outcome = self.outcomes.pop(0)

        async def answer():
            if outcome == "hang":
                await asyncio.Event().wait()
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        return answer()


@needs_ray
@pytest.mark.parametrize("outcomes,status,kind,calls", [
    (["died", "ok"], 200, None, 2),              # re-sent to a live replica
    (["died", "died", "died"], 503, "ReplicaDied", 3),
    (["hang"], 503, "Timeout", 1),                # the deadline answers, never a hang
    (["overloaded"], 503, "Overloaded", 1),
    ([ValueError("secret")], 500, "InternalError", 1),
])
def test_ingress_resends_a_request_whose_replica_died(outcomes, status, kind, calls):
    # ray (an extra) only in the tests marked needs_ray: the module also runs without it
    from ray.exceptions import ActorDiedError
    from ray.serve.exceptions import BackPressureError

    from bertonnx.runtime.server.ray_serve import Ingress

    ok = HttpResponse(200, ((b"content-type", b"application/json"),), b"{}")
    named = {"died": ActorDiedError(), "ok": ok, "hang": "hang",
             "overloaded": BackPressureError(num_queued_requests=1, max_queued_requests=1)}
    handle = _Handle(*(named.get(o, o) if isinstance(o, str) else o for o in outcomes))
    ingress = Ingress(handle, ServeOptions(), RayOptions("auto", request_timeout_s=0.2))
    record = HttpRequest("POST", "/predict", b"", (), b"{}")
    answer = asyncio.run(ingress.forward(record))
    assert answer.status == status and handle.calls == calls
    headers = dict(answer.headers)
    if status == 200:
        assert headers[b"x-bertonnx-attempts"] == b"2" and answer.body == b"{}"
    else:
        assert json.loads(answer.body)["type"] == kind and b"secret" not in answer.body
    if status == 503:
        assert headers[b"retry-after"] == b"1"


def test_relay_plays_a_request_into_the_app_once_it_is_loaded():
    """The replica's side, in process: startup returns only once the model answers (a
    replacement never answers "loading"); any route, query and error comes back whole."""
    gate = threading.Event()

    def slow_loader():
        gate.wait(10)
        return EchoPipeline()

    async def scenario():
        app = create_app("unused", loader=slow_loader)
        lifespan = Lifespan(app)
        startup = asyncio.ensure_future(lifespan.startup())
        await asyncio.sleep(0)
        assert not startup.done()
        await asyncio.get_running_loop().run_in_executor(None, gate.set)
        await startup
        json_ = ((b"content-type", b"application/json"),)
        ok = await exchange(app, HttpRequest("POST", "/predict", b"a=1", json_,
                                             b'{"inputs": ["x", "y"]}'))
        bad = await exchange(app, HttpRequest("POST", "/predict", b"", json_, b"{"))
        missing = await exchange(app, HttpRequest("GET", "/nope", b"", (), b""))
        health = await exchange(app, HttpRequest("GET", "/health", b"", (), b""))
        await lifespan.shutdown()
        return ok, bad, missing, health

    ok, bad, missing, health = asyncio.run(scenario())
    assert ok.status == 200 and json.loads(ok.body) == [
        [{"token_str": "X", "score": 0.5, "top_k": 5}], [{"token_str": "Y", "score": 0.5,
                                                           "top_k": 5}]]
    assert dict(ok.headers)[b"content-type"] == b"application/json"
    assert bad.status == 400 and json.loads(bad.body)["type"] == "InputError"
    assert missing.status == 404
    assert health.status == 200


def test_relay_startup_fails_when_the_model_cannot_load():
    def broken():
        raise InputError("model.onnx is damaged", "export again")

    async def scenario():
        await Lifespan(create_app("unused", loader=broken)).startup()

    with pytest.raises(ArtifactError, match="damaged"):
        asyncio.run(scenario())


def test_ray_options_are_checked():
    assert RayOptions("auto").bounds == (1, 1) and not RayOptions("auto").autoscaling
    assert RayOptions("auto", replicas=3, max_replicas=5).bounds == (1, 5)
    assert RayOptions("auto", replicas=3, min_replicas=2).bounds == (2, 3)
    for bad in ({"replicas": 0}, {"min_replicas": 4, "max_replicas": 2},
                {"replica_cpus": 0}, {"request_timeout_s": 0}):
        with pytest.raises(InputError):
            RayOptions("auto", **bad)


@needs_ray
def test_replica_config_fixed_and_autoscaling():
    from bertonnx.runtime.server.ray_serve import replica_config, replica_options  # ray: lazy

    fixed = replica_config(ServeOptions(), RayOptions("auto", replicas=2))
    assert fixed["num_replicas"] == 2 and "autoscaling_config" not in fixed
    assert fixed["max_ongoing_requests"] == 256 and fixed["ray_actor_options"] == {"num_cpus": 1.0}
    scaled = replica_config(ServeOptions(), RayOptions("auto", replicas=1, min_replicas=2,
                                                       max_replicas=4))
    assert "num_replicas" not in scaled
    assert scaled["autoscaling_config"]["min_replicas"] == 2
    assert scaled["autoscaling_config"]["max_replicas"] == 4
    assert scaled["autoscaling_config"]["initial_replicas"] == 2
    assert replica_options(ServeOptions(), RayOptions("auto", replica_cpus=1.5)).threads == 2
    assert replica_options(ServeOptions(threads=3), RayOptions("auto")).threads == 3


def test_ray_without_the_extra_is_one_line(monkeypatch, capsys, tiny_export):
    monkeypatch.setitem(sys.modules, "ray", None)   # `import ray` raises ImportError
    for name in [m for m in sys.modules if m.startswith("bertonnx.runtime.server.ray_serve")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["serve", str(tiny_export("text-classification")), "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert err == ("bertonnx: error: --ray needs the ray extra — pip install "
                   "'bertonnx[ray]'\n")


@needs_ray
def test_an_address_with_nothing_listening_is_one_line_at_once(capsys, tiny_export):
    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["serve", str(tiny_export("text-classification")), "--ray",
                 f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot reach a Ray cluster at 127.0.0.1:{port}" in err


def test_a_ray_client_address_is_refused():
    with pytest.raises(ConfigError, match="--ray takes a cluster's address .* not a Ray Client"):
        join("ray://127.0.0.1:10001")


@pytest.mark.parametrize("args,message", [
    (["--replicas", "2"], "--replicas needs --ray ADDRESS"),
    (["--ray", "auto", "--max-connections", "5"], "--max-connections does not apply with --ray"),
])
def test_ray_flags_are_refused_where_they_mean_nothing(capsys, tiny_export, args, message):
    assert main(["serve", str(tiny_export("text-classification")), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertonnx: error: " + message) and err.count("\n") == 1
