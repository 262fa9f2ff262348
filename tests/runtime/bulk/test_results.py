"""`bertonnx run`, what it writes: every task x input format equals the library row by row, and
every task option reaches the pipeline; Parquet output holds what JSONL does; the default and
folders made elsewhere; ids kept or numbered; bad rows (JSONL, CSV) become error rows, or stop
the job with --on-error fail; a chunk read alone from its start equals the whole read."""
from __future__ import annotations

import itertools

import pytest

from tests.conftest import CLS, EMB, FM, NER, QA
from tests.runtime._compare import assert_same
from tests.runtime.bulk._helpers import bulk, read_output, write_input

pq = pytest.importorskip("pyarrow.parquet")
import pyarrow as pa  # noqa: E402  (after the skip: the parquet extra brings it)

CONTEXT = ("the cat sat on the mat and the dog ran to the river . paris is a city and london "
           "is a city . the team made music in the house by the water .")
LONG = " ".join(["the old man sat in the house by the river and the dog ran"] * 6)
# per task: the rows (each the task's fields), flags for `run`, and the same as the library's
# keyword arguments (a flag left out is the library's default, as on every entry point)
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
          [], {}),
}
FORMATS = ("jsonl", "csv", "text", "parquet")


def library_input(fields: dict):
    """The row as the library takes it in a list: plain-text tasks a str, the others a dict."""
    return fields["text"] if set(fields) == {"text"} else fields


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
                          tmp_path / name, *flags, "--chunk-size", 2, "--max-errors", 1)
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
             b'',                                               # skipped (issue 43)
             b'{"id": "utf8", "text": "caf\xe9 [MASK]"}',
             b'{"id": {"a": 1}, "text": "the [MASK]"}',
             b'{"id": "nomask", "text": "no mask here"}',   # only the pipeline call finds it
             b'{"id": "ok2", "text": "a [MASK] dog ."}',
             b'[1, 2]']
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    rc, stdout, err = bulk(capsys, tiny_export(FM), "--input", src, "--output", out,
                           "--chunk-size", 4, "--no-progress")
    # the output holds every row, and the exit status says rows failed (issue 31)
    assert rc == 1 and err.splitlines() == [
        f"bertonnx: error: 8 of {len(lines) - 1} rows failed, more than --max-errors 0 "
        f"tolerates (their error rows are in {out}) — fix those rows, or pass --max-errors 8 "
        "to accept them"], err
    got = read_output(out)
    assert len(got) == len(lines) - 1
    errors = {r["id"]: r["error"] for r in got if "error" in r}
    # a row that cannot be read has no id of its own: its number stands in
    assert set(errors) == {"empty", 2, "field", "type", 6, 7, "nomask", 10}
    assert "empty" in errors["empty"]
    assert "not valid JSON" in errors[2]
    assert 'no "text" field' in errors["field"]
    assert "got int" in errors["type"]
    assert "not UTF-8 (byte 0xe9" in errors[6]
    assert "id must be a string or an integer" in errors[7]
    assert "no mask token [MASK] in the text" in errors["nomask"]
    assert "JSON list is not an input of fill-mask" in errors[10]
    want = ours(FM)(["the cat [MASK] .", "a [MASK] dog ."])
    assert [r["result"] for r in got if "result" in r] == want
    assert stdout.startswith(f"{len(lines) - 1} rows (8 errors, 1 blank line skipped)")
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
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / "o.jsonl",
                      "--max-errors", 3)
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


def test_an_unclosed_csv_quote_is_one_line_naming_where_it_opens(capsys, tiny_export, tmp_path):
    """csv's non-strict reader reads an unclosed quote to the end of the file: records after
    it would silently be one text (issue 31)."""
    src = tmp_path / "in.csv"
    src.write_bytes(b'id,text\r\na,the cat\r\nb,"a dog\r\nran\r\nc,the river\r\n')
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / "o.jsonl")
    assert rc == 2 and err.splitlines() == [
        f"bertonnx: error: {src} line 3: a quoted field has no closing quote, so the rest of "
        'the file would be one text — close the quote (a quote inside a quoted field is '
        'written "")'], err
    src.write_bytes(b'id,text\na,"the ""cat"""\nb,"a dog\nran"\n')   # closed: no complaint
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / "p.jsonl")
    assert rc == 0, err
    assert [r["id"] for r in read_output(tmp_path / "p.jsonl")] == ["a", "b"]
