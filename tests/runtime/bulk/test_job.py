"""`bertonnx run`, the job around the rows: refusals are one line; SIGKILL mid-write then
--resume equals a clean run byte for byte; progress lines and the summary; a missing pyarrow
is one line; no torch imported; peak memory flat in the file's size."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.runtime.bulk.job import CRASH_ENV

from tests.conftest import CLS, EMB, FM, cli_without
from tests.runtime._engines import OPENVINO
from tests.runtime.bulk._helpers import bulk, write_input


def test_refusals_are_one_line(capsys, tiny_export, tmp_path):
    d = tiny_export(CLS)
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    out = tmp_path / "o.jsonl"
    assert bulk(capsys, d, "--input", src, "--output", out)[0] == 0
    for argv, message in [
        ([], "exists — pass --force"),
        (["--targets", "cat"], "--targets is not an option of classify"),
        (["--top-k", "0"], "--top-k must be an integer from 1 to 1000 or 'all'"),
        (["--actors", "2"], "--actors is an option of --ray"),
        (["--field", "txt=a"], "names no field of text-classification"),
        (["--resume", "--force"], "contradict"),
        (["--streams", "x"], "streams 'x' is not \"auto\" or an integer from 1 to 64"),
        (["--streams", "0"], "streams 0 is not"),
    ]:
        rc, _, err = bulk(capsys, d, "--input", src, "--output", out, *argv)
        assert rc == 2 and message in err and err.count("\n") == 1, (argv, err)
    rc, _, err = bulk(capsys, d, "--input", tmp_path / "nope.data", "--output", out)
    assert rc == 2 and "input file" in err and "does not exist" in err
    rc, _, err = bulk(capsys, d, "--input", src, "--output", src, "--force")
    assert rc == 2 and "is the --input file" in err
    rc, _, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", tmp_path / "f.jsonl",
                      "--top-k", "0")
    assert rc == 2 and "--top-k" in err and err.count("\n") == 1
    before = out.read_bytes()
    assert bulk(capsys, d, "--input", src, "--output", out, "--force")[0] == 0
    assert out.read_bytes() == before
    rc, stdout, _ = bulk(capsys, d, "--input", src, "--output", out, "--resume")
    assert rc == 0 and "complete: nothing to resume" in stdout


def _cli(*argv, env=None) -> subprocess.CompletedProcess:
    code = "import sys; from bertonnx.runtime.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "run", *map(str, argv)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("ext", ["jsonl", "parquet"])
def test_sigkill_mid_write_then_resume_equals_a_clean_run(tiny_export, tmp_path, ext):
    rows = [{"id": f"q{i}", "text": " ".join(["the cat sat"] * (1 + i % 9)) + " [MASK] ."}
            for i in range(40)] + [{"id": "bad", "text": ""}]
    src = write_input(tmp_path / "in.parquet", "parquet", rows)
    args = [tiny_export(FM), "--input", src, "--chunk-size", 6, "--top-k", 2, "--max-errors", 1]
    clean = tmp_path / f"clean.{ext}"
    assert _cli(*args, "--output", clean).returncode == 0
    out = tmp_path / f"out.{ext}"
    killed = _cli(*args, "--output", out, env={CRASH_ENV: "3"})
    assert killed.returncode == -9, killed.stderr          # SIGKILL, mid-write of chunk 4
    partial = tmp_path / f"out.{ext}.partial"
    assert not out.exists() and json.loads((partial / "commit.json").read_text())["rows"] == 18
    if ext == "jsonl":   # the torn chunk is on disk past the committed bytes
        assert (partial / "data.jsonl").stat().st_size > json.loads(
            (partial / "commit.json").read_text())["state"]["bytes"]
    again = _cli(*args, "--output", out)                   # no --resume: refused
    assert again.returncode == 2 and "--resume to finish it" in again.stderr
    other = _cli(*args[:5], "--top-k", 3, "--output", out, "--resume")  # other flags: refused
    assert other.returncode == 2 and "params" in other.stderr
    if OPENVINO:   # another engine's numbers in the same output: refused too
        other = _cli(*args, "--output", out, "--resume", "--providers", "openvino:f32")
        assert other.returncode == 2, other.stderr
        assert "other settings (engine was cpu:f32, now openvino:f32)" in other.stderr
    # --chunk-size left out: the stopped job's own, from its commit.json (issue 31)
    resumed = _cli(*args[:3], *args[5:], "--output", out, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert (summary["rows"], summary["errors"], summary["resumed_from"]) == (41, 1, 18)
    assert out.read_bytes() == clean.read_bytes()
    assert not partial.exists()


def test_progress_lines_and_summary(capsys, tiny_export, tmp_path):
    from bertonnx.runtime import load
    from bertonnx.runtime.bulk import JobOptions, run_job

    src = write_input(tmp_path / "in.txt", "text", [{"text": f"the cat {i}"} for i in range(9)])
    summary = run_job(load(tiny_export(CLS)), JobOptions(src, tmp_path / "o.jsonl",
                                                         chunk_size=4, every=0.0))
    lines = capsys.readouterr().err.splitlines()
    assert "\r" not in "".join(lines)
    assert lines[0].startswith("o.jsonl: 4/9 rows (44.4%), errors=0, ") and "rows/s" in lines[0]
    assert lines[-1].startswith("o.jsonl: 9/9 rows (100.0%)")
    assert (summary.rows, summary.errors, summary.new_rows) == (9, 0, 9)
    assert "9 rows (0 errors)" in summary.line() and "rows/s" in summary.line()


def test_failed_rows_exit_1_and_say_how_many(capsys, tiny_export, tmp_path):
    """Every row failed: the output holds them all, the summary counts them, the exit status
    is 1 past --max-errors (default 0), 0 within it (issue 31)."""
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "no mask"}, {"text": " "}])
    out = tmp_path / "o.jsonl"
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", out, "--json",
                           "--no-progress")
    assert rc == 1, err
    summary = json.loads(stdout)
    assert (summary["rows"], summary["errors"], summary["failed"]) == (2, 2, True)
    assert err.splitlines() == [
        f"bertonnx: error: 2 of 2 rows failed, more than --max-errors 0 tolerates (their error "
        f"rows are in {out}) — fix those rows, or pass --max-errors 2 to accept them"]
    assert [sorted(json.loads(r)) for r in out.read_text().splitlines()] == [["error", "id"]] * 2
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", out, "--force",
                           "--max-errors", 1, "--no-progress")
    assert rc == 1 and stdout.startswith("2 rows (2 errors)") and "--max-errors 1" in err
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", out, "--force",
                           "--max-errors", 2, "--json", "--no-progress")
    assert rc == 0 and err == "" and json.loads(stdout)["failed"] is False


def test_missing_pyarrow_is_one_line(tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    got = cli_without(("pyarrow", "pyarrow.parquet"), "run", tiny_export(CLS), "--input", src,
                      "--output", tmp_path / "o.parquet")
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        "bertonnx: error: Parquet files need pyarrow, which is not installed — "
        "pip install 'bertonnx[parquet]'"]


def test_run_imports_no_torch(tiny_export, tmp_path):
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    code = ("import sys; from bertonnx.runtime.cli import main\n"
            f"rc = main(['run', {str(tiny_export(EMB))!r}, '--input', {str(src)!r}, "
            f"'--output', {str(tmp_path / 'o.parquet')!r}])\n"
            "print(rc, sorted(m for m in ('torch', 'transformers', 'onnx') if m in sys.modules))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert got.stdout.strip().splitlines()[-1] == "0 []", got.stderr


def _peak_rss_mb(*argv) -> float:
    """Peak RSS of one `bertonnx run` child (os.wait4: this child's own, not the max of all)."""
    code = "import sys; from bertonnx.runtime.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "run", *map(str, argv)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    return usage.ru_maxrss / 1024  # KiB on Linux


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_file(tiny_export, tmp_path):
    words = "the cat sat on a mat and the dog ran to the river in paris".split()

    def make(n: int) -> Path:
        path = tmp_path / f"rows-{n}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({"id": i, "text": " ".join(words[i % 7:i % 7 + 3 + i % 5])})
                        + "\n")
        return path

    small, large = make(5_000), make(100_000)
    args = [tiny_export(CLS), "--no-progress", "--top-k", "all"]
    base = _peak_rss_mb(*args, "--input", small, "--output", tmp_path / "s.jsonl")
    peak = _peak_rss_mb(*args, "--input", large, "--output", tmp_path / "l.jsonl")
    assert sum(1 for _ in open(tmp_path / "l.jsonl")) == 100_000
    assert peak - base <= 64, (base, peak)


def test_streams_answer_as_one_call_at_a_time(capsys, tiny_export, tmp_path):
    """--streams 2 runs two calls at once, the threads split between them: the same rows."""
    import numpy as np

    rows = [{"id": i, "text": "the cat sat on the mat " * (1 + i % 7)} for i in range(40)]
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows)
    rows = {}
    for streams in ("1", "2"):
        out = tmp_path / f"o{streams}.jsonl"
        assert bulk(capsys, tiny_export(EMB), "--input", src, "--output", out, "--threads", "2",
                    "--batch-size", "4", "--streams", streams)[0] == 0
        rows[streams] = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["id"] for r in rows["2"]] == [r["id"] for r in rows["1"]] == list(range(40))
    np.testing.assert_allclose([r["result"] for r in rows["2"]],
                               [r["result"] for r in rows["1"]], atol=1e-5)

