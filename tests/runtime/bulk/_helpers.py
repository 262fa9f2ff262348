"""What the `bertonnx run` tests share: running the command in-process, writing an input file
of each format, and reading an output file (JSONL or Parquet) back as row dicts."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bertonnx.runtime.cli import main

pq = pytest.importorskip("pyarrow.parquet")
import pyarrow as pa  # noqa: E402  (after the skip: the parquet extra brings it)


def bulk(capsys, *argv):
    """`bertonnx run ARGV` in this process: (exit code, stdout, stderr)."""
    rc = main(["run", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


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

