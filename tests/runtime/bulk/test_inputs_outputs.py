"""`bertonnx run` on what files hold in practice (issue 43): blank lines are skipped and counted,
as `bertonnx embed --input` skips them; a CSV quote closed with more text after it stops the
job in one line instead of merging records; an output extension it cannot write is refused."""
from __future__ import annotations

import json

import pytest

from bertonnx.runtime.cli import main
from tests.conftest import CLS, EMB
from tests.runtime.bulk._helpers import bulk, read_output

FILES = {  # per format: a file with blank lines (whitespace-only too), and its texts
    "text": b"\nthe cat sat\n   \na dog ran\r\n\r\nhappy music\n\n",
    "jsonl": b'\n{"text": "the cat sat"}\n \t\n"a dog ran"\r\n\r\n{"text": "happy music"}\n\n',
    "csv": b'text\r\n\r\nthe cat sat\r\n\r\na dog ran\nhappy music\n\n',
}


@pytest.mark.parametrize("fmt", list(FILES))
def test_blank_lines_are_skipped_and_counted(capsys, tiny_export, ours, tmp_path, fmt):
    src = tmp_path / f"in.{fmt}"
    src.write_bytes(FILES[fmt])
    out = tmp_path / "o.jsonl"
    rc, stdout, err = bulk(capsys, tiny_export(EMB), "--input", src, "--output", out,
                           "--no-progress", "--json")
    assert rc == 0, err
    got = read_output(out)
    texts = ["the cat sat", "a dog ran", "happy music"]
    assert [r["result"] for r in got] == ours(EMB)(texts)
    # a row without an id keeps its line's (record's) number: the blank ones are gaps
    assert [r["id"] for r in got] == {"text": [1, 3, 5], "jsonl": [1, 3, 5],
                                      "csv": [1, 3, 4]}[fmt]
    summary = json.loads(stdout)
    blank = {"text": 4, "jsonl": 4, "csv": 3}[fmt]
    assert (summary["rows"], summary["errors"], summary["blank"]) == (3, 0, blank)
    if fmt != "csv":  # as the task command's --input (JSONL or text), which skips them too
        assert main(["embed", str(tiny_export(EMB)), "--input", str(src), "--json"]) == 0
        assert len(json.loads(capsys.readouterr().out)) == 3
    rc, stdout, _ = bulk(capsys, tiny_export(EMB), "--input", src, "--output",
                         tmp_path / "p.jsonl", "--no-progress")
    assert rc == 0 and stdout.startswith(f"3 rows (0 errors, {blank} blank lines skipped)")


def test_blank_lines_across_chunks_resume_and_parquet(capsys, tiny_export, tmp_path):
    """A chunk of blank lines only writes nothing (a Parquet part with no rows, before the
    ids' type is known); the committed count of input rows still moves on."""
    src = tmp_path / "in.jsonl"
    src.write_text('\n\n{"id": "a", "text": "the cat"}\n\n\n{"id": "b", "text": "a dog"}\n',
                   encoding="utf-8")
    for name in ("o.parquet", "o.jsonl"):
        rc, stdout, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output",
                               tmp_path / name, "--chunk-size", 2, "--no-progress", "--json")
        assert rc == 0, err
        assert [r["id"] for r in read_output(tmp_path / name)] == ["a", "b"]
        assert json.loads(stdout)["blank"] == 4


def test_csv_quote_closed_with_text_after_it_stops_in_one_line(capsys, tiny_export, tmp_path):
    """csv's default reader merges `"a fine evening` up to the next quote into one field, and
    the records between silently vanish (issue 43)."""
    src = tmp_path / "in.csv"
    src.write_text('id,text\n1,"a fine evening\n2,another\n3,"the last one"\n', encoding="utf-8")
    out = tmp_path / "o.jsonl"
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", out)
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(f"bertonnx: error: {src} line 2: the record is not valid CSV "), err
    assert "(on line 4)" in err and "closing quote must be followed by a comma" in err
    assert not out.exists()
    # the same past the first chunk: the line is still counted from the file's start
    src.write_text("id,text\n" + "".join(f"{i},ok {i}\n" for i in range(5))
                   + 'x,"a"b\n', encoding="utf-8")
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output",
                      tmp_path / "p.jsonl", "--chunk-size", 2)
    assert rc == 2 and f"{src} line 7: the record is not valid CSV" in err, err


@pytest.mark.parametrize("name", ["x.xlsx", "x.csv", "x.json", "x"])
def test_an_output_format_it_cannot_write_is_refused(capsys, tiny_export, tmp_path, name):
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\n", encoding="utf-8")
    rc, _, err = bulk(capsys, tiny_export(CLS), "--input", src, "--output", tmp_path / name)
    assert rc == 2 and err.count("\n") == 1, err
    assert "writes JSONL or Parquet" in err and ".jsonl" in err and ".parquet" in err, err
    assert list(tmp_path.iterdir()) == [src]
