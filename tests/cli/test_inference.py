"""`bertonnx fill-mask | classify | qa | tokens | embed`: JSON equals the library, tables read,
--input files, one-line errors with exit ≠ 0, and no torch import."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bertonnx.runtime.cli import main

from tests.conftest import CLS, EMB, NER, QA

from tests.runtime._compare import assert_same


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def test_json_equals_library(capsys, tiny_export, ours):
    d = {"fill-mask": tiny_export("fill-mask"), "classify": tiny_export(CLS),
         "qa": tiny_export(QA), "ner": tiny_export(NER),
         "embed": tiny_export(EMB)}
    assert_same(run_json(capsys, "fill-mask", d["fill-mask"], "the cat [MASK] .", "--top-k", 3),
                ours("fill-mask")("the cat [MASK] .", top_k=3))
    assert_same(run_json(capsys, "fill-mask", d["fill-mask"], "the [MASK] sat",
                         "--targets", "cat,dog"),
                ours("fill-mask")("the [MASK] sat", targets=["cat", "dog"]))
    assert_same(run_json(capsys, "classify", d["classify"], "the cat", "a dog", "--top-k", "all"),
                ours(CLS)(["the cat", "a dog"], top_k=None))
    assert_same(run_json(capsys, "classify", d["classify"], "the cat", "--pair", "a dog",
                         "--function-to-apply", "sigmoid"),
                ours(CLS)({"text": "the cat", "text_pair": "a dog"},
                                 function_to_apply="sigmoid"))
    # no --top-k: transformers' flat shape, exactly what the library returns
    assert_same(run_json(capsys, "classify", d["classify"], "the cat"),
                ours(CLS)("the cat"))
    flat = run_json(capsys, "classify", d["classify"], "the cat", "a dog")
    assert_same(flat, ours(CLS)(["the cat", "a dog"]))
    assert all(isinstance(r, dict) for r in flat)
    ctx = " ".join(["the cat sat on the mat and the dog ran to the river ."] * 6)
    assert_same(run_json(capsys, "qa", d["qa"], "-q", "where?", "-c", ctx, "--top-k", 3,
                         "--doc-stride", 16, "--handle-impossible-answer"),
                ours(QA)(question="where?", context=ctx, top_k=3, doc_stride=16,
                           handle_impossible_answer=True))
    assert_same(run_json(capsys, "tokens", d["ner"], "the players walked to paris",
                         "--aggregation-strategy", "first", "--ignore-labels", ""),
                ours(NER)("the players walked to paris", aggregation_strategy="first",
                            ignore_labels=[]))
    vec = run_json(capsys, "embed", d["embed"], "the cat", "--no-normalize")
    assert_same(vec, ours(EMB)("the cat", normalize=False))
    assert_same(run_json(capsys, "embed", d["embed"], "the cat"), ours(EMB)("the cat"))


def test_old_flag_spellings_work_but_are_hidden(capsys, tiny_export, ours):
    d = tiny_export(CLS)
    assert_same(run_json(capsys, "classify", d, "the cat", "--function", "sigmoid"),
                run_json(capsys, "classify", d, "the cat", "--function-to-apply", "sigmoid"))
    assert_same(run_json(capsys, "tokens", tiny_export(NER), "a b", "--aggregation", "max"),
                ours(NER)("a b", aggregation_strategy="max"))
    for cmd, new, old in (("classify", "--function-to-apply", "--function "),
                          ("tokens", "--aggregation-strategy", "--aggregation ")):
        rc, out, _ = run(capsys, cmd, "--help")
        assert new in out and old not in out


def test_tables(capsys, tiny_export):
    rc, out, _ = run(capsys, "classify", tiny_export(CLS), "the cat", "--top-k", "all")
    assert rc == 0 and all(lab in out for lab in ("negative", "neutral", "positive"))
    rc, out, _ = run(capsys, "embed", tiny_export(EMB), "the cat", "a dog", "paris")
    assert rc == 0 and "cosine" in out and "1.0000" in out
    rc, out, _ = run(capsys, "qa", tiny_export(QA), "-q", "who?", "-c", "the cat sat")
    assert rc == 0 and "answer" in out
    rc, out, _ = run(capsys, "fill-mask", tiny_export("fill-mask"), "a [MASK] and a [MASK]")
    assert rc == 0 and "mask 2:" in out
    rc, out, _ = run(capsys, "tokens", tiny_export(NER), "the cat", "--aggregation", "simple",
                     "--ignore-labels", "")
    assert rc == 0 and "entity group" in out


def test_input_files(capsys, tiny_export, ours, tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_bytes("\ufeffthe cat sat\r\n\r\na dog ran\r\n".encode("utf-8"))  # BOM + CRLF
    got = run_json(capsys, "classify", tiny_export(CLS), "--input", plain)
    assert_same(got, ours(CLS)(["the cat sat", "a dog ran"]))
    jsonl = tmp_path / "pairs.jsonl"
    jsonl.write_text('{"text": "the cat", "text_pair": "a dog"}\n"paris"\n', encoding="utf-8")
    got = run_json(capsys, "classify", tiny_export(CLS), "--input", jsonl, "--top-k", 2)
    assert_same(got, ours(CLS)([{"text": "the cat", "text_pair": "a dog"}, "paris"],
                                      top_k=2))
    qa = tmp_path / "qa.jsonl"
    qa.write_text('{"question": "who?", "context": "the cat sat"}\n'
                  '{"question": "where?", "context": "in paris"}\n', encoding="utf-8")
    got = run_json(capsys, "qa", tiny_export(QA), "--input", qa)
    assert_same(got, ours(QA)([{"question": "who?", "context": "the cat sat"},
                                 {"question": "where?", "context": "in paris"}]))


@pytest.mark.parametrize("argv, message", [
    (["fill-mask", "{fill-mask}", "no mask here"], "no mask token"),
    (["classify", "{classify}", "   "], "empty"),
    (["classify", "{fill-mask}", "the cat"], "exported for fill-mask"),
    # the command that serves the export, by its name (issue 31: not "the feature-extraction
    # command")
    (["fill-mask", "{embed}", "the [MASK]"], "was exported for feature-extraction, not "
     "fill-mask — export the model with --task fill-mask, or use the `bertonnx embed` command"),
    (["embed", "{missing}", "the cat"], "does not exist"),
    (["classify", "{classify}", "--input", "{latin1}"], "not UTF-8"),
    (["classify", "{classify}", "--input", "{missing}"], "does not exist"),
    (["classify", "{classify}", "--input", "{badjson}"], "not valid JSON"),
    (["classify", "{classify}"], "no input text"),
    (["qa", "{qa}", "-q", "what"], "both --question and --context"),
    (["qa", "{qa}", "-q", " ".join(["what"] * 70), "-c", "the cat"], "max_question_len"),
    (["embed", "{embed}", "x", "--providers", "cuda"], "not available"),
])
def test_errors_are_one_line(capsys, tiny_export, tmp_path, argv, message):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    (tmp_path / "bad.jsonl").write_text('{"text": "a"\n', encoding="utf-8")
    paths = {"fill-mask": tiny_export("fill-mask"), "classify": tiny_export(CLS),
             "qa": tiny_export(QA), "embed": tiny_export(EMB),
             "missing": tmp_path / "nope", "latin1": tmp_path / "latin1.txt",
             "badjson": tmp_path / "bad.jsonl"}
    argv = [a.format(**paths) for a in argv]
    rc, out, err = run(capsys, *argv)
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bertonnx: error:"), err
    assert message in lines[0] and "Traceback" not in err


def test_commands_do_not_import_torch(tiny_export):
    """Run the real entry point in a fresh process and list what it imported."""
    classify, qa = tiny_export(CLS), tiny_export(QA)
    code = (
        "import sys\n"
        "from bertonnx.runtime.cli import main\n"
        f"rc = main(['classify', {str(classify)!r}, 'the cat', '--json'])\n"
        f"rc += main(['qa', {str(qa)!r}, '-q', 'who', '-c', 'the cat'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print('RC', rc, 'IMPORTED', bad)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "RC 0 IMPORTED []"


def test_entry_point_exit_code(tiny_export):
    exe = [sys.executable, "-m", "bertonnx.runtime.cli"]
    r = subprocess.run([*exe, "fill-mask", str(tiny_export("fill-mask")), "no mask"],
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


def test_top_k_has_one_bound_everywhere(capsys, tiny_export, ours, tmp_path):
    """One top_k bound (runtime/core/parameters.py MAX_TOP_K) and one message on the library,
    the CLI and bulk jobs (the server: tests/runtime/server/test_app.py), instead of the CLI
    printing every vocabulary entry while the server capped at 1,000 (issue 31)."""
    from bertonnx.runtime.core.errors import InputError
    from bertonnx.runtime.core.parameters import MAX_TOP_K

    message = (f"top_k must be an integer from 1 to {MAX_TOP_K}, got {MAX_TOP_K + 1} — pass "
               "e.g. top_k=5")
    with pytest.raises(InputError) as e:
        ours("fill-mask")("the [MASK] sat", top_k=MAX_TOP_K + 1)
    assert str(e.value) == message
    rc, out, err = run(capsys, "fill-mask", tiny_export("fill-mask"), "the [MASK] sat",
                       "--top-k", MAX_TOP_K + 1)
    assert (rc, out, err) == (2, "", f"bertonnx: error: {message}\n")
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "the [MASK] sat"}\n', encoding="utf-8")
    rc, out, err = run(capsys, "run", tiny_export("fill-mask"), "--input", src, "--output",
                       tmp_path / "o.jsonl", "--top-k", MAX_TOP_K + 1)
    assert (rc, out, err) == (2, "", f"bertonnx: error: {message}\n")
    # below the bound, top_k past the vocabulary still gives it all
    assert len(ours("fill-mask")("the [MASK] sat", top_k=MAX_TOP_K)) == len(
        ours("fill-mask").tokenizer.backend.get_vocab())
    for limit in (ours(QA), ours(CLS)):
        with pytest.raises(InputError, match=f"top_k must be an integer from 1 to {MAX_TOP_K}"):
            limit({"question": "who", "context": "the cat"} if limit is ours(QA) else "the cat",
                  top_k=MAX_TOP_K + 1)


@pytest.mark.parametrize("targets", ["", " , ,"])
def test_empty_targets_are_refused(capsys, tiny_export, ours, targets):
    """--targets "" once meant "no targets" (the whole vocabulary) in silence (issue 31)."""
    from bertonnx.runtime.core.errors import InputError

    rc, out, err = run(capsys, "fill-mask", tiny_export("fill-mask"), "the [MASK] sat",
                       "--targets", targets)
    assert (rc, out) == (2, "") and err == (
        f"bertonnx: error: --targets must name at least one word, got {targets!r} — pass "
        "comma-separated words, e.g. --targets cat,dog, or leave it out to score the whole "
        "vocabulary\n")
    for value in ([], "", "  ", ["cat", ""]):
        with pytest.raises(InputError) as e:
            ours("fill-mask")("the [MASK] sat", targets=value)
        assert str(e.value) == (f"targets must be a word or a non-empty list of words or null, "
                                f"got {value!r} — pass e.g. targets=[\"word\"]")


def test_embed_sparse_table_json_and_errors(capsys, tiny_export, ours):
    folder = tiny_export("sparse-embedding")
    assert_same(run_json(capsys, "embed-sparse", folder, "the cat", "a dog", "--top-k", 3,
                         "--return-tokens"),
                ours("sparse-embedding")(["the cat", "a dog"], top_k=3, return_tokens=True))
    rc, out, _ = run(capsys, "embed-sparse", folder, "the cat sat on the mat")
    heaviest = ours("sparse-embedding")("the cat sat on the mat", return_tokens=True)[0]
    assert rc == 0 and "the 10 heaviest shown; --json for all" in out
    assert f"{heaviest['token']}  " in out.splitlines()[3] and "weight" in out
    rc, out, err = run(capsys, "embed-sparse", folder, "the cat", "--top-k", 0)
    assert rc == 2 and "--top-k" in err and "Traceback" not in err
    rc, out, err = run(capsys, "embed-sparse", tiny_export(EMB), "the cat")
    assert rc == 2 and err.strip().endswith("use the `bertonnx embed` command")
