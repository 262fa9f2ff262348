"""`bertonnx run`: every task x input format equals the library row by row; JSONL and Parquet
output; error rows and --on-error fail; ids; SIGKILL mid-write then --resume equals a clean run
byte for byte; refusals; peak memory flat in the file's size; torch-free."""
from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.runtime.bulk.job import CRASH_ENV
from bertonnx.runtime.cli import main

from tests.conftest import CLS, EMB, FM, NER, QA, cli_without
from tests.runtime._compare import assert_same

pq = pytest.importorskip("pyarrow.parquet")
import pyarrow as pa  # noqa: E402  (after the skip: the parquet extra brings it)

CONTEXT = ("the cat sat on the mat and the dog ran to the river . paris is a city and london "
           "is a city . the team made music in the house by the water .")
LONG = " ".join(["the old man sat in the house by the river and the dog ran"] * 6)
# per task: the rows (each the task's fields), flags for `run`, and the same as the library's
# keyword arguments (the command's defaults included: embed normalizes, as `bertonnx embed`)
CASES = {
    FM: ([{"text": "the cat [MASK] on the mat ."}, {"text": "[MASK] is a city ."},
          {"text": "the [MASK] sat on the [MASK] ."}, {"text": "the [MASK] " + LONG},
          {"text": "the dog [MASK]"}],
         ["--top-k", "3"], {"top_k": 3}),
    CLS: ([{"text": "the cat sat"}, {"text": "a dog ran", "text_pair": "the river"},
           {"text": LONG}, {"text": "happy music"}, {"text": "sad film", "text_pair": "a game"}],
          [], {}),
    QA: ([{"question": "where did the cat sit ?", "context": CONTEXT},
          {"question": "who ran ?", "context": CONTEXT + " " + LONG},
          {"question": "what is paris ?", "context": "paris is a city ."}],
         ["--top-k", "2", "--max-answer-len", "5", "--doc-stride", "8"],
         {"top_k": 2, "max_answer_len": 5, "doc_stride": 8}),
    NER: ([{"text": "the man walked to paris"}, {"text": LONG}, {"text": "london music"}],
          ["--aggregation-strategy", "simple"], {"aggregation_strategy": "simple"}),
    EMB: ([{"text": "the cat sat"}, {"text": LONG}, {"text": "a dog"}, {"text": "paris"}],
          [], {"normalize": True}),
}
FORMATS = ("jsonl", "csv", "text", "parquet")


def bulk(capsys, *argv):
    rc = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def library_input(fields: dict):
    """The row as the library takes it in a list: plain-text tasks a str, the others a dict."""
    return fields["text"] if set(fields) == {"text"} else fields


def write_input(path: Path, fmt: str, rows: list[dict]) -> Path:
    """`rows` (dicts of fields, an "id" among them or not) as a file of format `fmt`."""
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "text":
        path.write_text("".join(r["text"] + "\n" for r in rows), encoding="utf-8")
    elif fmt == "csv":
        names = list(dict.fromkeys(k for r in rows for k in r))
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, names)
            w.writeheader()
            w.writerows(rows)
    else:
        names = list(dict.fromkeys(k for r in rows for k in r))
        pq.write_table(pa.table({n: [r.get(n) for r in rows] for n in names}), path,
                       row_group_size=2)  # several row groups: resume skips some whole
    return path


def read_output(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        table = pq.read_table(path).to_pylist()
        rows = []
        for r in table:
            row = {"id": r["id"]}
            if r["error"] is not None:
                row["error"] = r["error"]
            else:
                row["result"] = (r["result"] if isinstance(r["result"], list)
                                 else json.loads(r["result"]))
            rows.append(row)
        return rows
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("task", list(CASES))
def test_every_task_and_format_equals_the_library(capsys, tiny_export, ours, tmp_path, task,
                                                  fmt):
    rows, flags, kwargs = CASES[task]
    if fmt == "text" and task == QA:
        src = write_input(tmp_path / "in.txt", "text", [{"text": "who?"}])
        rc, _, err = bulk(capsys, tiny_export(task), "--input", src, "--output",
                          tmp_path / "o.jsonl")
        assert rc == 2 and "plain-text file cannot hold question-answering" in err
        return
    if fmt == "text":  # a line holds a text, not its pair
        rows = [{"text": r["text"]} for r in rows]
    ext = {"text": "txt"}.get(fmt, fmt)
    src = write_input(tmp_path / f"in.{ext}", fmt, rows)
    out = tmp_path / "out.jsonl"
    rc, stdout, err = bulk(capsys, tiny_export(task), "--input", src, "--output", out, *flags,
                           "--chunk-size", 2)
    assert rc == 0, err
    assert stdout.startswith(f"{len(rows)} rows (0 errors)")
    want = ours(task)([library_input(r) for r in rows], **kwargs)
    got = read_output(out)
    assert [g["id"] for g in got] == list(range(len(rows)))   # no id field: numbered from 0
    assert [g["result"] for g in got] == want
    assert not out.with_name("out.jsonl.partial").exists()


@pytest.mark.parametrize("task, flags, kwargs", [
    (FM, ["--targets", "cat,dog"], {"targets": ["cat", "dog"]}),
    (CLS, ["--top-k", "2", "--function-to-apply", "sigmoid"],
     {"top_k": 2, "function_to_apply": "sigmoid"}),
    (CLS, ["--top-k", "all"], {"top_k": None}),
    (QA, ["--handle-impossible-answer", "--no-align-to-words", "--max-seq-len", "32",
          "--max-question-len", "8"],
     {"handle_impossible_answer": True, "align_to_words": False, "max_seq_len": 32,
      "max_question_len": 8}),
    (NER, ["--ignore-labels", "", "--stride", "4", "--aggregation-strategy", "max"],
     {"ignore_labels": [], "stride": 4, "aggregation_strategy": "max"}),
    (EMB, ["--no-normalize", "--pooling", "cls"], {"normalize": False, "pooling": "cls"}),
])
def test_task_options_reach_the_pipeline(capsys, tiny_export, ours, tmp_path, task, flags,
                                         kwargs):
    rows = CASES[task][0]
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows)
    rc, _, err = bulk(capsys, tiny_export(task), "--input", src, "--output", tmp_path / "o.jsonl",
                      *flags)
    assert rc == 0, err
    want = ours(task)([library_input(r) for r in rows], **kwargs)
    assert [r["result"] for r in read_output(tmp_path / "o.jsonl")] == want


@pytest.mark.parametrize("task", list(CASES))
def test_parquet_output_holds_what_jsonl_does(capsys, tiny_export, tmp_path, task):
    rows, flags, _ = CASES[task]
    rows = [{"id": f"r{i}", **r} for i, r in enumerate(rows)] + [{"id": "bad", "text": ""}]
    src = write_input(tmp_path / "in.jsonl", "jsonl", rows)
    for name in ("out.jsonl", "out.parquet"):
        rc, _, err = bulk(capsys, tiny_export(task), "--input", src, "--output",
                          tmp_path / name, *flags, "--chunk-size", 2)
        assert rc == 0, err
    assert read_output(tmp_path / "out.parquet") == read_output(tmp_path / "out.jsonl")
    schema = pq.read_schema(tmp_path / "out.parquet")
    assert schema.field("id").type == pa.string()
    assert schema.field("result").type == (pa.list_(pa.float32()) if task == EMB else pa.string())


def test_default_and_folders_made_elsewhere(capsys, tiny_checkpoint, ours, tmp_path):
    from bertonnx.runtime import load

    from tests.conftest import make_foreign_export

    src = write_input(tmp_path / "in.txt", "text", [{"text": "Paris is the [MASK] of France."},
                                                   {"text": "The [MASK] sat on the mat."}])
    rc, _, err = bulk(capsys, "default", "--input", src, "--output", tmp_path / "d.jsonl",
                      "--top-k", 2)
    assert rc == 0, err
    want = load("default")(["Paris is the [MASK] of France.", "The [MASK] sat on the mat."],
                           top_k=2)
    assert [r["result"] for r in read_output(tmp_path / "d.jsonl")] == want
    foreign = make_foreign_export(tiny_checkpoint(CLS), tmp_path / "optimum", CLS)
    texts = write_input(tmp_path / "t.txt", "text", [{"text": "the cat sat"}, {"text": "a dog"}])
    rc, _, err = bulk(capsys, foreign, "--input", texts, "--output", tmp_path / "f.jsonl",
                      "--top-k", "all")
    assert rc == 0, err
    got = [r["result"] for r in read_output(tmp_path / "f.jsonl")]
    assert_same(got, ours(CLS)(["the cat sat", "a dog"], top_k=None))  # another graph: ≤ 1e-4


def test_ids_kept_or_numbered(capsys, tiny_export, ours, tmp_path):
    d = tiny_export(CLS)
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "x7", "text": "the cat"}\n{"text": "a dog"}\n'
                   '{"id": 40, "text": "paris"}\n"london"\n{"id": null, "text": "music"}\n',
                   encoding="utf-8")
    assert bulk(capsys, d, "--input", src, "--output", tmp_path / "o.jsonl")[0] == 0
    assert [r["id"] for r in read_output(tmp_path / "o.jsonl")] == ["x7", 1, 40, 3, 4]
    table = write_input(tmp_path / "in.parquet", "parquet",
                        [{"id": 10 * i, "text": t} for i, t in enumerate(["a", "b", "c"])])
    assert bulk(capsys, d, "--input", table, "--output", tmp_path / "o.parquet")[0] == 0
    assert pq.read_table(tmp_path / "o.parquet").column("id").to_pylist() == [0, 10, 20]
    assert pq.read_schema(tmp_path / "o.parquet").field("id").type == pa.int64()
    # a CSV whose columns are named otherwise: --field maps them
    named = write_input(tmp_path / "named.csv", "csv",
                        [{"key": "k1", "review": "the cat", "other": "a dog"}])
    assert bulk(capsys, d, "--input", named, "--output", tmp_path / "n.jsonl", "--field",
                "text=review", "--field", "id=key", "--pair", "other")[0] == 0
    assert read_output(tmp_path / "n.jsonl") == [
        {"id": "k1", "result": ours(CLS)([{"text": "the cat", "text_pair": "a dog"}])[0]}]


def test_bad_rows_become_error_rows_and_the_rest_still_run(capsys, tiny_export, ours, tmp_path):
    lines = [b'{"id": "ok1", "text": "the cat [MASK] ."}',
             b'{"id": "empty", "text": "   "}',
             b'{"id": "json", "text": "the cat',
             b'{"id": "field", "txt": "the [MASK]"}',
             b'{"id": "type", "text": 5}',
             b'',
             b'{"id": "utf8", "text": "caf\xe9 [MASK]"}',
             b'{"id": {"a": 1}, "text": "the [MASK]"}',
             b'{"id": "nomask", "text": "no mask here"}',   # only the pipeline call finds it
             b'{"id": "ok2", "text": "a [MASK] dog ."}',
             b'[1, 2]']
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", out,
                           "--chunk-size", 4)
    assert rc == 0, err
    got = read_output(out)
    assert len(got) == len(lines)
    errors = {r["id"]: r["error"] for r in got if "error" in r}
    # a row that cannot be read has no id of its own: its number stands in
    assert set(errors) == {"empty", 2, "field", "type", 5, 6, 7, "nomask", 10}
    assert "empty" in errors["empty"]
    assert "not valid JSON" in errors[2]
    assert 'no "text" field' in errors["field"]
    assert "got int" in errors["type"]
    assert "blank line" in errors[5]
    assert "not UTF-8 (byte 0xe9" in errors[6]
    assert "id must be a string or an integer" in errors[7]
    assert "no mask token [MASK] in the text" in errors["nomask"]
    assert "JSON list is not an input of fill-mask" in errors[10]
    want = ours(FM)(["the cat [MASK] .", "a [MASK] dog ."])
    assert [r["result"] for r in got if "result" in r] == want
    assert stdout.startswith(f"{len(lines)} rows (9 errors)")
    # the same file with --on-error fail: stops at the first bad row, exit 1, one line
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output",
                           tmp_path / "fail.jsonl", "--on-error", "fail")
    assert rc == 1 and stdout == ""
    assert err.count("\n") == 1 and "error: row 1 (id 'empty'): text is empty" in err
    assert not (tmp_path / "fail.jsonl").exists()


def test_a_chunk_read_alone_from_its_start_equals_the_whole_read(tmp_path):
    """chunk_starts + rows(first, at), as a Ray read task reads one chunk, give exactly the
    rows a whole read gives there — BOM, blank and non-UTF-8 lines, CSV quoted newlines, lone
    \r and \r\n line ends, bad records, Parquet row groups."""
    from bertonnx.runtime.bulk.readers import open_reader
    from bertonnx.runtime.core.pipelines import TextClassificationPipeline as P

    files = {
        "jsonl": b'\xef\xbb\xbf{"text": "a"}\n\n{"text": "b"}\r\nnot json\n\xff\n"c"\n[1]\n{"text": "d"}',
        "text": b"one\ntwo\r\n\nfour\n\xfe five\nsix\nseven\neight\n",
        "csv": (b'\xef\xbb\xbfid,text\r\n1,"a\r\nb"\r2,c\r\n3,"x,y"\n4\n5,caf\xe9\n'
                b'6,"q""r"\r\n7,s\r8,t'),
    }
    columns = {"id": "id", "text": "text", "text_pair": "text_pair"}
    for fmt, data in files.items():
        path = tmp_path / f"in.{fmt}"
        path.write_bytes(data)
        whole = list(open_reader(path, fmt, P, columns).rows())
        assert len(whole) >= 8, (fmt, whole)
        for start in (0, 1, 2):
            starts = open_reader(path, fmt, P, columns).chunk_starts(3, start)
            assert [n for n, _ in starts] == list(range(start, len(whole), 3)), fmt
            for n, at in starts:
                part = list(itertools.islice(open_reader(path, fmt, P, columns).rows(n, at), 3))
                assert part == whole[n:n + 3], (fmt, n, at)
    path = write_input(tmp_path / "in.parquet", "parquet", [{"text": f"t{i}"} for i in range(7)])
    whole = list(open_reader(path, "parquet", P, columns).rows())
    starts = open_reader(path, "parquet", P, columns).chunk_starts(3, 1)
    assert [n for n, _ in starts] == [1, 4]
    assert [list(itertools.islice(open_reader(path, "parquet", P, columns).rows(n, at), 3))
            for n, at in starts] == [whole[1:4], whole[4:7]]


def test_csv_problems_are_error_rows(capsys, tiny_export, tmp_path):
    src = tmp_path / "in.csv"
    src.write_bytes(b"id,text,text_pair\r\na,the cat,\r\nb,\"a dog\r\nran\",the river\r\n"
                    b"c,x,y,z\r\nd,caf\xe9,\r\ne,,music\r\n")
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / "o.jsonl")
    assert rc == 0, err
    got = {r["id"]: r for r in read_output(tmp_path / "o.jsonl")}
    assert list(got) == ["a", "b", 2, 3, "e"]   # unreadable records: their numbers
    assert "result" in got["a"] and "result" in got["b"]          # a quoted newline is one row
    assert "4 fields, the header 3" in got[2]["error"]
    assert "not UTF-8" in got[3]["error"]
    assert 'no "text" field' in got["e"]["error"]
    wrong = write_input(tmp_path / "wrong.csv", "csv", [{"review": "x"}])
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", wrong, "--output", tmp_path / "w.jsonl")
    assert rc == 2 and 'no "text" field among its columns (review)' in err


def test_refusals_are_one_line(capsys, tiny_export, tmp_path):
    d = tiny_export(CLS)
    src = write_input(tmp_path / "in.jsonl", "jsonl", [{"text": "the cat"}])
    out = tmp_path / "o.jsonl"
    assert bulk(capsys, d, "--input", src, "--output", out)[0] == 0
    for argv, message in [
        ([], "exists — pass --force"),
        (["--targets", "cat"], "--targets is not an option of classify"),
        (["--top-k", "0"], "--top-k must be a positive integer"),
        (["--actors", "2"], "--actors is an option of --ray"),
        (["--field", "txt=a"], "names no field of text-classification"),
        (["--resume", "--force"], "contradict"),
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
    args = [tiny_export(FM), "--input", src, "--chunk-size", 6, "--top-k", 2]
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
    other = _cli(*args[:-1], 3, "--output", out, "--resume")  # other flags: refused
    assert other.returncode == 2 and "params" in other.stderr
    resumed = _cli(*args, "--output", out, "--resume", "--json")
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
