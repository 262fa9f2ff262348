"""`bertonnx run --ray` and the Ray Data helper (runtime/bulk/ray.py, ray_job.py).

On a local two-node cluster the tests start (tests/runtime/_ray_cluster.py: a head with 2 CPUs
and a worker with 1, one actor of 1 CPU on each, room on the head for one restarted elsewhere):
the output file is byte for byte the local run's (JSONL with error rows; CSV to Parquet;
--on-error fail; --resume of a local run that was SIGKILLed); `Predictor` in a user's own Ray
Data job equals the library; and the worker node SIGKILLed mid-job — after rows it ran are
committed, with more left to do — still gives the clean run's file, no row lost or doubled.
Without a cluster: the folder shipping (materialise) and `Predictor` on each batch format.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertonnx.runtime.bulk.job import CRASH_ENV
from bertonnx.runtime.bulk.ray import (Predictor, fingerprint, folder_on_node, materialise,
                                       ship)
from bertonnx.runtime.cli import main

from tests.conftest import CLS, EMB, cli_without
from tests.runtime._engines import NO_OPENVINO, OPENVINO
from tests.runtime._ray_cluster import ENV, LocalCluster
from tests.runtime.bulk._helpers import read_output, write_input

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

WORDS = "the cat sat on a mat and the dog ran to the river in paris with music".split()


def rows(n: int) -> list[dict]:
    """n classify rows with ids; every 17th text empty (an error row), every 5th a pair."""
    out = []
    for i in range(n):
        text = "" if i % 17 == 3 else " ".join(WORDS[i % 9:i % 9 + 2 + i % 6])
        row = {"id": f"r{i}", "text": text}
        if i % 5 == 0:
            row["text_pair"] = WORDS[i % 13]
        out.append(row)
    return out


def bulk(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


BERTONNX = [sys.executable, "-m", "bertonnx.runtime.cli"]  # the `bertonnx` command
# a line of Ray's C++ core worker log, which the driver process writes to its stderr
RAY_LOG = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [DIWEF] \d+ \d+\] ")


def ray_bulk(*argv) -> tuple[int, str, str]:
    """`bertonnx run ... --ray` in a process of its own, as users run it: (exit status, stdout,
    stderr without Ray's own log lines). Not in pytest's process: a thread of Ray's that
    touches its core worker after ray.shutdown() ends the process at once with status 1 (Ray's
    QuickExit, seen once in CI) — here that ends one driver and the test says so; in pytest's
    process it ended the whole run without a word."""
    got = subprocess.run([*BERTONNX, "run", *map(str, argv)], timeout=300,
                         capture_output=True, text=True, env={**os.environ, **ENV})
    ours = "".join(x for x in got.stderr.splitlines(True) if not RAY_LOG.match(x))
    return got.returncode, got.stdout, ours


# --- without a cluster -------------------------------------------------------------------


def _identity(x):
    return x


def test_materialise_writes_the_shipped_files_once(tiny_export, tmp_path):
    export = tiny_export(CLS)
    shipped = ship(export, put=_identity)  # parts kept as bytes: no object store needed
    assert shipped.fingerprint == fingerprint(export)
    elsewhere = dataclasses.replace(shipped, path=str(tmp_path / "not-on-this-node"))
    root = tmp_path / "node-tmp"
    got = materialise(elsewhere, root, get=_identity)
    assert got == root / shipped.fingerprint and fingerprint(got) == shipped.fingerprint
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in export.iterdir())
    assert [p.name for p in root.iterdir()] == [shipped.fingerprint]  # no temporaries left
    # a second actor on the node finds the copy; nothing is fetched again
    assert materialise(elsewhere, root, get=None) == got
    # a damaged copy is replaced
    (got / "config.json").write_text("{}")
    assert fingerprint(materialise(elsewhere, root, get=_identity)) == shipped.fingerprint
    # folder_on_node: the driver's path in place when it holds the same files
    assert folder_on_node(shipped, root, get=None) == export
    changed = tmp_path / "changed"
    changed.mkdir()
    for p in export.iterdir():
        (changed / p.name).write_bytes(p.read_bytes())
    (changed / "vocab.txt").write_text("[PAD]\n")
    moved = dataclasses.replace(shipped, path=str(changed))
    assert folder_on_node(moved, root, get=_identity) == got  # not the different files
    assert folder_on_node(str(export)) == export  # a plain path is taken as it is
    # actors of one node racing: one copy, every one of them gets it, no temporaries left
    from concurrent.futures import ThreadPoolExecutor

    race = tmp_path / "race"
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: materialise(elsewhere, race, get=_identity), range(4)))
    assert got == [race / shipped.fingerprint] * 4
    assert [p.name for p in race.iterdir()] == [shipped.fingerprint]


def test_materialise_refuses_a_copy_that_does_not_match(tiny_export, tmp_path):
    from bertonnx.runtime.core.errors import ArtifactError

    shipped = ship(tiny_export(CLS), put=_identity)
    torn = dict(shipped.files)
    torn["config.json"] = (b"{}",)
    bad = dataclasses.replace(shipped, path=str(tmp_path / "gone"), files=torn)
    with pytest.raises(ArtifactError, match="does not match its fingerprint"):
        materialise(bad, tmp_path / "node", get=_identity)
    assert list((tmp_path / "node").iterdir()) == []


@pytest.mark.parametrize("fmt", ["pyarrow", "pandas", "numpy"])
def test_predictor_on_each_batch_format(tiny_export, ours, fmt):
    import numpy as np

    table = pa.Table.from_pylist(rows(12))
    batch = {"pyarrow": lambda: table, "pandas": table.to_pandas,
             "numpy": lambda: {c: np.array(table[c].to_pylist(), dtype=object)
                               for c in table.column_names}}[fmt]()
    out = Predictor(tiny_export(CLS), {"top_k": 2})(batch)
    got = pa.Table.from_pandas(out) if fmt == "pandas" else \
        pa.Table.from_pydict(dict(out)) if fmt == "numpy" else out
    assert got.column_names == ["id", "text", "text_pair", "result", "error"]
    assert got["id"].to_pylist() == table["id"].to_pylist()  # passed through untouched
    for r, res, err in zip(rows(12), got["result"].to_pylist(), got["error"].to_pylist()):
        if r["text"]:
            want = ours(CLS)([{k: v for k, v in r.items() if k != "id"} if "text_pair" in r
                              else r["text"]], top_k=2)[0]
            assert json.loads(res) == want and err is None
        else:
            assert res is None and "empty" in err


def test_predictor_gives_vectors_for_embeddings(tiny_export, ours):
    out = Predictor(tiny_export(EMB), {"normalize": True})(pa.table({"text": ["a cat", ""]}))
    assert out["result"].type == pa.list_(pa.float32())
    import numpy as np

    vec, none = out["result"].to_pylist()
    assert none is None and "empty" in out["error"][1].as_py()
    want = np.asarray(ours(EMB)(["a cat"], normalize=True)[0], dtype=np.float32)
    assert np.array_equal(np.asarray(vec, dtype=np.float32), want)  # float32, exactly


def test_rows_cross_to_the_actors_as_json_text():
    """No pickles (the runtime unpickles nothing): raw rows go as JSON text, a value JSON
    cannot carry becomes the error row the local job writes for it."""
    import datetime

    from bertonnx.runtime.bulk.ray_job import _raw_text, _raw_value
    from bertonnx.runtime.bulk.rows import BLANK, ReadError, RowReader
    from bertonnx.runtime.core.pipelines import PIPELINES

    rows = RowReader(PIPELINES[CLS], {})
    assert _raw_value(_raw_text(rows, BLANK, 3)) is BLANK  # a blank line: skipped remotely too
    for raw in ("a line \udcff", {"id": 7, "text": "x", "n": float("nan")}, [1, "a"],
                ReadError("the line is not valid JSON")):
        back = _raw_value(_raw_text(rows, raw, 3))
        assert json.dumps(back) == json.dumps(raw) if not isinstance(raw, ReadError) else back == raw
    dated = {"id": datetime.date(2026, 1, 2), "text": "a review"}  # a Parquet date32 id
    back = _raw_value(_raw_text(rows, dated, 3))
    assert back == ReadError(rows.row(dated, 3).error) and "the id must be" in back.message


def test_missing_ray_is_one_line(tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    got = cli_without(("ray",), "run", tiny_export(CLS), "--input", src,
                      "--output", tmp_path / "o.jsonl", "--ray", "auto")
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        "bertonnx: error: --ray needs the ray extra — pip install 'bertonnx[ray]'"]
    assert not (tmp_path / "o.jsonl.partial").exists()


def test_an_unreachable_cluster_is_one_line(capsys, tiny_export, tmp_path):
    pytest.importorskip("ray.data")
    import socket

    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / "o.jsonl",
                      "--ray", f"127.0.0.1:{port}")
    assert rc == 2 and err.count("\n") == 1
    assert f"cannot reach a Ray cluster at 127.0.0.1:{port}" in err
    assert not (tmp_path / "o.jsonl.partial").exists()  # nothing started


# --- on a two-node cluster ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("ray.data")
    # short: Ray's unix socket paths under the temp dir must stay within 108 bytes
    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"rb{os.getpid()}"
    c = LocalCluster(root)
    try:
        # each node materialises shipped folders under its own TMPDIR, not the machine's /tmp
        c.start_head(cpus=2, env={"TMPDIR": str(tmp_path_factory.mktemp("headtmp"))})
        c.add_worker("w1", cpus=1, env={"TMPDIR": str(tmp_path_factory.mktemp("w1tmp"))})
        yield c
    finally:
        c.stop()
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ray_env(monkeypatch):
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def _pair(capsys, tmp_path, export, src, out_name, *flags, address):
    """(local output bytes, --ray output bytes) of the same job."""
    local, remote = tmp_path / f"local-{out_name}", tmp_path / f"ray-{out_name}"
    rc, _, err = bulk(capsys, export, "--input", src, "--output", local, "--no-progress", *flags)
    # error rows past --max-errors: exit 1 and one line, from both (issue 31)
    assert (rc, err) == (0, "") or (rc == 1 and "rows failed" in err), err
    rc_ray, out, err_ray = ray_bulk(export, "--input", src, "--output", remote,
                                    "--no-progress", "--ray", address, "--actors", "2", *flags)
    assert (rc_ray, err_ray) == (rc, err.replace(str(local), str(remote))), err_ray
    assert out.count("\n") == 1 and "rows (" in out  # stdout: the summary only
    return local.read_bytes(), remote.read_bytes()


def test_ray_run_equals_the_local_run(cluster, ray_env, capsys, tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows(500))
    with open(src, "a", encoding="utf-8") as f:
        f.write("\nnot json\n")  # a skipped blank line and a reader's error row travel too
    local, remote = _pair(capsys, tmp_path, tiny_export(CLS), src, "o.jsonl", "--top-k", "all",
                          "--chunk-size", "64", address=cluster.address)
    assert remote == local
    got = [json.loads(x) for x in remote.splitlines()]
    assert [r["id"] for r in got] == [f"r{i}" for i in range(500)] + [501]
    assert sum("error" in r for r in got) == 31


@pytest.mark.skipif(not OPENVINO, reason=NO_OPENVINO)
def test_ray_actors_run_the_engine_the_job_asked_for(cluster, ray_env, capsys, tiny_export,
                                                    tmp_path):
    """`--providers openvino:f32` reaches every actor (each loads the export on OpenVINO):
    the --ray output equals the local OpenVINO run's and the CPU provider's within 1e-4."""
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows(60))
    local, remote = _pair(capsys, tmp_path, tiny_export(CLS), src, "ov.jsonl", "--top-k", "all",
                          "--chunk-size", "16", "--providers", "openvino:f32",
                          address=cluster.address)
    cpu = tmp_path / "cpu.jsonl"
    # rows(60) holds empty texts: error rows, exit 1, as in the OpenVINO runs
    assert bulk(capsys, tiny_export(CLS), "--input", src, "--output", cpu, "--no-progress",
                "--top-k", "all", "--providers", "cpu")[0] in (0, 1)
    for path in (tmp_path / "ray-ov.jsonl", tmp_path / "local-ov.jsonl"):
        for a, b in zip(read_output(cpu), read_output(path)):
            assert a["id"] == b["id"] and ("error" in a) == ("error" in b)
            if "result" in a:
                assert [x["label"] for x in a["result"]] == [x["label"] for x in b["result"]]
                assert max(abs(x["score"] - y["score"])
                           for x, y in zip(a["result"], b["result"])) <= 1e-4


def test_ray_csv_to_parquet_and_on_error_fail(cluster, ray_env, capsys, tiny_export,
                                              tmp_path):
    src = write_input(tmp_path / "in.csv", "csv", rows(200))
    local, remote = _pair(capsys, tmp_path, tiny_export(CLS), src, "o.parquet",
                          "--chunk-size", "50", address=cluster.address)
    assert remote == local
    assert pq.read_table(tmp_path / "ray-o.parquet").num_rows == 200
    # --on-error fail: the same line, after the same committed chunks (row 3 is in chunk 0)
    clean = write_input(tmp_path / "clean.jsonl", "jsonl",
                        [r for r in rows(200) if r["text"]][:150] + [{"id": "bad", "text": ""}])
    results = []
    for name, extra in (("l", []), ("r", ["--ray", cluster.address, "--actors", "2"])):
        argv = (tiny_export(CLS), "--input", clean, "--output", tmp_path / f"{name}.jsonl",
                "--chunk-size", "50", "--on-error", "fail", "--no-progress", *extra)
        rc, _, err = ray_bulk(*argv) if extra else bulk(capsys, *argv)
        commit = json.loads((tmp_path / f"{name}.jsonl.partial" / "commit.json").read_text())
        results.append((rc, err.strip().splitlines()[-1], commit["rows"]))
    assert results[0] == results[1] == (
        1, "bertonnx: error: row 150 (id 'bad'): the input is empty — pass some text; "
           "--on-error row writes it as an error row and goes on", 150)


def test_ray_resumes_a_killed_local_run(cluster, ray_env, capsys, tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows(300))
    export = tiny_export(CLS)
    rc, _, err = bulk(capsys, export, "--input", src, "--output", tmp_path / "clean.jsonl",
                      "--chunk-size", "64", "--no-progress", "--max-errors", "100")
    assert rc == 0, err
    argv = ["run", export, "--input", src, "--output", tmp_path / "o.jsonl", "--chunk-size",
            "64", "--no-progress", "--max-errors", "100"]
    killed = subprocess.run([*BERTONNX, *map(str, argv)], timeout=120,
                            env={**os.environ, CRASH_ENV: "2"}, capture_output=True)
    assert killed.returncode == -9
    rc, out, err = ray_bulk(*argv[1:], "--resume", "--ray", cluster.address, "--actors", "2")
    assert rc == 0, err
    assert "resumed after row 128" in out
    assert (tmp_path / "o.jsonl").read_bytes() == (tmp_path / "clean.jsonl").read_bytes()


USERS_JOB = """
import dataclasses, json, sys
import ray
from bertonnx.runtime.bulk.ray import Predictor, ship
address, export, elsewhere, rows = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
ray.init(address=address, logging_level="WARNING", log_to_driver=False)
try:
    # the driver's path does not exist on the nodes: each materialises the shipped files
    shipped = dataclasses.replace(ship(export), path=elsewhere)
    ds = ray.data.from_items(rows).map_batches(
        Predictor, fn_constructor_kwargs={"folder": shipped, "params": {"top_k": 1}},
        compute=ray.data.ActorPoolStrategy(size=2), batch_size=8, batch_format="pandas")
    got = ds.take_all()
finally:
    ray.shutdown()
print(json.dumps([{k: r[k] for k in ("id", "result", "error")} for r in got]))
"""


def test_predictor_in_a_users_ray_data_job(cluster, ray_env, tiny_export, ours, tmp_path):
    # the user's script in a process of its own, as ray_bulk's jobs are
    job = subprocess.run([sys.executable, "-c", USERS_JOB, cluster.address,
                          str(tiny_export(CLS)), str(tmp_path / "driver-only"),
                          json.dumps(rows(40))], capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    got = json.loads(job.stdout.strip().splitlines()[-1])
    assert [r["id"] for r in got] == [f"r{i}" for i in range(40)]
    for r, g in zip(rows(40), got):
        if r["text"]:
            value = {k: v for k, v in r.items() if k != "id"} if "text_pair" in r else r["text"]
            assert json.loads(g["result"]) == ours(CLS)([value], top_k=1)[0]
        else:
            assert g["result"] is None and "empty" in g["error"]


def test_a_worker_node_lost_mid_job_loses_and_doubles_nothing(cluster, tiny_export, tmp_path):
    """Last in this module: it kills the worker node. The driver pauses (PAUSE_ENV) once rows
    from both nodes are committed; the node is SIGKILLed — its raylet, agents and the actor
    with its pipeline — and the driver goes on; the file equals a clean local run's."""
    from bertonnx.runtime.bulk.ray_job import PAUSE_ENV

    src = write_input(tmp_path / "in.jsonl", "jsonl", rows(2000))
    export = tiny_export(CLS)
    flags = ["--input", src, "--chunk-size", "50", "--no-progress", "--top-k", "all",
             "--max-errors", "2000"]
    assert main(["run", str(export), *map(str, flags), "--output",
                 str(tmp_path / "clean.jsonl")]) == 0
    hook = tmp_path / "hook"
    hook.mkdir()
    driver = subprocess.Popen(
        [*BERTONNX, "run", export, *map(str, flags), "--output",
         str(tmp_path / "o.jsonl"), "--ray", cluster.address, "--actors", "2"],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "driver.err", "wb"),
        env={**os.environ, **ENV, PAUSE_ENV: f"2:{hook}"})
    try:
        deadline = time.monotonic() + 240
        while not (hook / "paused.json").exists():  # bounded: the deadline, or the driver ends
            assert driver.poll() is None, (tmp_path / "driver.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the driver never paused"
            time.sleep(0.05)
        paused = json.loads((hook / "paused.json").read_text())
        assert len(paused["nodes"]) == 2 and 0 < paused["rows"] < 2000  # both nodes, mid-job
        cluster.kill("w1")
        (hook / "go").touch()
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, (tmp_path / "driver.err").read_text()[-3000:]
    assert b"2000 rows (" in out
    got = read_output(tmp_path / "o.jsonl")
    assert [r["id"] for r in got] == [f"r{i}" for i in range(2000)]  # none lost or doubled
    assert (tmp_path / "o.jsonl").read_bytes() == (tmp_path / "clean.jsonl").read_bytes()
