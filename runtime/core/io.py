"""Reading `--input FILE` for the inference commands: JSONL or plain text, one input a line.

A file whose first non-blank line starts with "{" or "\"" is JSONL (each line a JSON object or
string); anything else is plain text, one input per line. A UTF-8 BOM and CRLF line ends are
accepted; blank lines are skipped; bytes that are not UTF-8 are an InputError naming the line.
"-" reads standard input.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import InputError


def read_lines(path: str | Path) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines of `path` (or stdin for "-")."""
    if str(path) == "-":
        name = "standard input"
        if sys.stdin is None:  # the process started with file descriptor 0 closed
            raise InputError("standard input is closed, so --input - has nothing to read",
                             "pipe the inputs in (... | bertonnx CMD DIR --input -) or pass "
                             "--input FILE")
        try:
            data = sys.stdin.buffer.read()
        except (OSError, ValueError) as e:  # a descriptor closed or unreadable under us
            raise InputError(f"cannot read standard input ({e})",
                             "pipe the inputs in, or pass --input FILE") from None
    else:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"input file {p} does not exist" if not p.exists()
                             else f"{p} is not a file", "check the --input path")
        try:
            data = p.read_bytes()
        except OSError as e:
            raise InputError(f"cannot read {p} ({e.strerror})", "check its permissions") from e
        name = str(p)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{name} is not UTF-8 (byte 0x{data[e.start]:02x} on line {line})",
                         "save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`") from e
    return [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]


def read_input_file(path: str | Path) -> list:
    """Inputs of a file: strings (plain text or JSON strings) or dicts (JSON objects)."""
    lines = read_lines(path)
    if not lines:
        raise InputError(f"{path} has no inputs", "put one input per line")
    if not lines[0][1].lstrip().startswith(("{", '"')):
        return [ln for _, ln in lines]
    items = []
    for n, ln in lines:
        try:
            item = json.loads(ln)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} line {n} is not valid JSON ({e.msg})",
                             "write one JSON object per line (JSONL), or plain text lines") from e
        if not isinstance(item, (str, dict)):
            raise InputError(f"{path} line {n} holds a {type(item).__name__}",
                             "each line must be a JSON object or string")
        items.append(item)
    return items


def texts_of(items: list, path) -> list[str]:
    """Plain texts from inputs: a string, or an object's "text" field."""
    out = []
    for i, item in enumerate(items, 1):
        if isinstance(item, dict):
            if not isinstance(item.get("text"), str):
                raise InputError(f"{path} input {i} has no \"text\" string", 'use {"text": "..."}')
            item = item["text"]
        out.append(item)
    return out
