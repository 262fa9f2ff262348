"""`bertonnx fill-mask | classify | qa | tokens | embed`: JSON equals the library, tables read,
--input files, one-line errors with exit ≠ 0, and no torch import."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertonnx.runtime.cli import main

from tests.runtime._compare import assert_same


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_json_equals_library(capsys, export_of, ours):
    d = {n: export_of(n)[1] for n in ("fill-mask", "classify", "qa", "ner", "embed")}
    assert_same(run_json(capsys, "fill-mask", d["fill-mask"], "the cat [MASK] .", "--top-k", 3),
                ours("fill-mask")("the cat [MASK] .", top_k=3))
    assert_same(run_json(capsys, "fill-mask", d["fill-mask"], "the [MASK] sat",
                         "--targets", "cat,dog"),
                ours("fill-mask")("the [MASK] sat", targets=["cat", "dog"]))
    assert_same(run_json(capsys, "classify", d["classify"], "the cat", "a dog", "--top-k", "all"),
                ours("classify")(["the cat", "a dog"], top_k=None))
    assert_same(run_json(capsys, "classify", d["classify"], "the cat", "--pair", "a dog",
                         "--function-to-apply", "sigmoid"),
                ours("classify")({"text": "the cat", "text_pair": "a dog"},
                                 function_to_apply="sigmoid"))
    # no --top-k: transformers' flat shape, exactly what the library returns
    assert_same(run_json(capsys, "classify", d["classify"], "the cat"),
                ours("classify")("the cat"))
    flat = run_json(capsys, "classify", d["classify"], "the cat", "a dog")
    assert_same(flat, ours("classify")(["the cat", "a dog"]))
    assert all(isinstance(r, dict) for r in flat)
    ctx = " ".join(["the cat sat on the mat and the dog ran to the river ."] * 6)
    assert_same(run_json(capsys, "qa", d["qa"], "-q", "where?", "-c", ctx, "--top-k", 3,
                         "--doc-stride", 16, "--handle-impossible-answer"),
                ours("qa")(question="where?", context=ctx, top_k=3, doc_stride=16,
                           handle_impossible_answer=True))
    assert_same(run_json(capsys, "tokens", d["ner"], "the players walked to paris",
                         "--aggregation-strategy", "first", "--ignore-labels", ""),
                ours("ner")("the players walked to paris", aggregation_strategy="first",
                            ignore_labels=[]))
    vec = run_json(capsys, "embed", d["embed"], "the cat", "--no-normalize")
    assert_same(vec, ours("embed")("the cat"))


def test_old_flag_spellings_work_but_are_hidden(capsys, export_of, ours):
    d = export_of("classify")[1]
    assert_same(run_json(capsys, "classify", d, "the cat", "--function", "sigmoid"),
                run_json(capsys, "classify", d, "the cat", "--function-to-apply", "sigmoid"))
    assert_same(run_json(capsys, "tokens", export_of("ner")[1], "a b", "--aggregation", "max"),
                ours("ner")("a b", aggregation_strategy="max"))
    for cmd, new, old in (("classify", "--function-to-apply", "--function "),
                          ("tokens", "--aggregation-strategy", "--aggregation ")):
        rc, out, _ = run(capsys, cmd, "--help")
        assert new in out and old not in out


def test_tables(capsys, export_of):
    rc, out, _ = run(capsys, "classify", export_of("classify")[1], "the cat", "--top-k", "all")
    assert rc == 0 and all(lab in out for lab in ("negative", "neutral", "positive"))
    rc, out, _ = run(capsys, "embed", export_of("embed")[1], "the cat", "a dog", "paris")
    assert rc == 0 and "cosine" in out and "1.0000" in out
    rc, out, _ = run(capsys, "qa", export_of("qa")[1], "-q", "who?", "-c", "the cat sat")
    assert rc == 0 and "answer" in out
    rc, out, _ = run(capsys, "fill-mask", export_of("fill-mask")[1], "a [MASK] and a [MASK]")
    assert rc == 0 and "mask 2:" in out
    rc, out, _ = run(capsys, "tokens", export_of("ner")[1], "the cat", "--aggregation", "simple",
                     "--ignore-labels", "")
    assert rc == 0 and "entity group" in out


def test_input_files(capsys, export_of, ours, tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_bytes("\ufeffthe cat sat\r\n\r\na dog ran\r\n".encode("utf-8"))  # BOM + CRLF
    got = run_json(capsys, "classify", export_of("classify")[1], "--input", plain)
    assert_same(got, ours("classify")(["the cat sat", "a dog ran"]))
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"text": "the cat", "text_pair": "a dog"}\n"paris"\n', encoding="utf-8")
    got = run_json(capsys, "classify", export_of("classify")[1], "--input", jsonl, "--top-k", 2)
    assert_same(got, ours("classify")([{"text": "the cat", "text_pair": "a dog"}, "paris"],
                                      top_k=2))
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "who?", "context": "the cat sat"}\n'
                  '{"question": "where?", "context": "in paris"}\n', encoding="utf-8")
    got = run_json(capsys, "qa", export_of("qa")[1], "--input", qa)
    assert_same(got, ours("qa")([{"question": "who?", "context": "the cat sat"},
                                 {"question": "where?", "context": "in paris"}]))


@pytest.mark.parametrize("argv, message", [
    (["fill-mask", "{fill-mask}", "no mask here"], "no mask token"),
    (["classify", "{classify}", "   "], "empty"),
    (["classify", "{fill-mask}", "the cat"], "exported for fill-mask"),
    (["embed", "{missing}", "the cat"], "does not exist"),
    (["classify", "{classify}", "--input", "{latin1}"], "not UTF-8"),
    (["classify", "{classify}", "--input", "{missing}"], "does not exist"),
    (["classify", "{classify}", "--input", "{badjson}"], "not valid JSON"),
    (["classify", "{classify}"], "no input text"),
    (["qa", "{qa}", "-q", "what"], "both --question and --context"),
    (["qa", "{qa}", "-q", " ".join(["what"] * 70), "-c", "the cat"], "max_question_len"),
    (["embed", "{embed}", "x", "--providers", "cuda"], "not available"),
])
def test_errors_are_one_line(capsys, export_of, tmp_path, argv, message):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    (tmp_path / "bad.jsonl").write_text('{"text": "a"\n', encoding="utf-8")
    paths = {"fill-mask": export_of("fill-mask")[1], "classify": export_of("classify")[1],
             "qa": export_of("qa")[1], "embed": export_of("embed")[1],
             "missing": tmp_path / "nope", "latin1": tmp_path / "latin1.txt",
             "badjson": tmp_path / "bad.jsonl"}
    argv = [a.format(**paths) for a in argv]
    rc, out, err = run(capsys, *argv)
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertonnx: error:"), err
    assert message in lines[0] and "Traceback" not in err


def test_commands_do_not_import_torch(export_of):
    """Run the real entry point in a fresh process and list what it imported."""
    code = (
        "import sys\n"
        "from bertonnx.runtime.cli import main\n"
        f"rc = main(['classify', {str(export_of('classify')[1])!r}, 'the cat', '--json'])\n"
        f"rc += main(['qa', {str(export_of('qa')[1])!r}, '-q', 'who', '-c', 'the cat'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print('RC', rc, 'IMPORTED', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "RC 0 IMPORTED []"


def test_entry_point_exit_code(export_of):
    exe = [sys.executable, "-m", "bertonnx.runtime.cli"]
    r = subprocess.run([*exe, "fill-mask", str(export_of("fill-mask")[1]), "no mask"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("bertonnx: error:")
    assert len(r.stderr.strip().splitlines()) == 1


def test_listing_commands_imports_neither_torch_nor_onnx():
    code = ("import sys\nfrom bertonnx.runtime.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'onnx', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Commands:" in out.stdout and out.stdout.strip().endswith("[]"), out.stdout
