"""The table test_bad_inputs.py runs: every row (`Case`) one user mistake, with the error the
CLI and the library must give for it; `DAMAGE`, what is done to a copy of a good export for
the artifact rows; `FILES`, the input files the file rows read.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bertonnx.runtime import ArtifactError, ConfigError, InputError, TaskMismatchError, load
from bertonnx.runtime.core.contract import MANIFEST_NAME, MODEL_NAME
from bertonnx.runtime.core.io import read_input_file, texts_of
from bertonnx.runtime.core.manifest import sha256

from tests.conftest import CLS, EMB, FM, NER, QA

LONG_QUESTION = " ".join(["the"] * 80)          # 80 tokens > max_question_len 64


# -- damage done to a copy of a good export ------------------------------------------------

def _edit_manifest(fn):
    def damage(d: Path):
        m = json.loads((d / MANIFEST_NAME).read_text(encoding="utf-8"))
        fn(m)
        (d / MANIFEST_NAME).write_text(json.dumps(m), encoding="utf-8")
    return damage


def _rehash(d: Path):
    """Make the manifest agree with the damaged files, so the next check in line is reached."""
    m = json.loads((d / MANIFEST_NAME).read_text(encoding="utf-8"))
    m["files"] = {f: sha256(d / f) for f in m["files"] if (d / f).is_file()}
    (d / MANIFEST_NAME).write_text(json.dumps(m), encoding="utf-8")


def _truncate(d: Path):
    data = (d / MODEL_NAME).read_bytes()
    (d / MODEL_NAME).write_bytes(data[:len(data) // 3])


def _foreign(d: Path):
    (d / MODEL_NAME).write_bytes(b"PK\x03\x04 this is a zip file, not an ONNX graph\n" * 20)


def _symlink_out(d: Path):
    outside = d.parent / f"{d.name}-outside-config.json"
    (d / "config.json").rename(outside)
    (d / "config.json").symlink_to(outside)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "empty": lambda d: [p.unlink() for p in d.iterdir()],
    "truncated-model": _truncate,
    "truncated-model-rehashed": lambda d: (_truncate(d), _rehash(d)),
    "foreign-model": _foreign,
    "foreign-model-rehashed": lambda d: (_foreign(d), _rehash(d)),
    "model-deleted": lambda d: (d / MODEL_NAME).unlink(),
    "sha-corrupted": _edit_manifest(lambda m: m["files"].__setitem__(MODEL_NAME, "0" * 64)),
    "newer-version": _edit_manifest(lambda m: m.__setitem__("version", 99)),
    "no-version": _edit_manifest(lambda m: m.pop("version")),
    "path-escape": _edit_manifest(lambda m: m["files"].__setitem__("../x", "0" * 64)),
    "absolute-path": _edit_manifest(lambda m: m["files"].__setitem__("/etc/hostname", "0" * 64)),
    "symlink-escape": _symlink_out,
    "manifest-not-json": lambda d: (d / MANIFEST_NAME).write_text("{task: fill-mask", "utf-8"),
    "manifest-binary": lambda d: (d / MANIFEST_NAME).write_bytes(b"\xff\xfe\x00\x01"),
    "manifest-list": lambda d: (d / MANIFEST_NAME).write_text("[]", "utf-8"),
    "manifest-no-task": _edit_manifest(lambda m: m.pop("task")),
    "manifest-unknown-task": _edit_manifest(lambda m: m.__setitem__("task", "summarization")),
    "manifest-files-list": _edit_manifest(lambda m: m.__setitem__("files", [MODEL_NAME])),
    "manifest-files-empty": _edit_manifest(lambda m: m.__setitem__("files", {})),
    "manifest-opset-str": _edit_manifest(lambda m: m.__setitem__("opset", "17")),
    "manifest-deleted": lambda d: [(d / n).unlink() for n in (MANIFEST_NAME, "config.json")],
    "vocab-latin1": lambda d: ((d / "tokenizer.json").unlink(),
                               (d / "vocab.txt").write_bytes("caf\xe9\n".encode("latin-1")),
                               _rehash(d)),
    "no-tokenizer": lambda d: ((d / "tokenizer.json").unlink(), (d / "vocab.txt").unlink(),
                               _rehash(d)),
    "tokenizer-json-bad": lambda d: ((d / "tokenizer.json").write_text("{}", "utf-8"), _rehash(d)),
    "config-not-object": lambda d: ((d / "config.json").write_text("[1, 2]", "utf-8"), _rehash(d)),
    "tokenizer-config-list": lambda d: ((d / "tokenizer_config.json").write_text("[]", "utf-8"),
                                        _rehash(d)),
}


# -- input files ---------------------------------------------------------------------------

FILES = {
    "latin1.txt": "caf\xe9 [MASK]\n".encode("latin-1"),
    "surrogate-bytes.txt": b"a \xed\xa0\x80 [MASK]\n",            # UTF-8 of a lone surrogate
    "surrogate.jsonl": b'{"text": "a \\ud83d [MASK]"}\n',          # JSON escape of one
    "blank-crlf.txt": b"\xef\xbb\xbf\r\n  \r\n\t\r\n",
    "bad.jsonl": b'{"text": "a [MASK]"}\n{"text": oops}\n',
    "number.jsonl": b'"a [MASK]"\n42\n',
    "qa-plain.txt": b"where is the cat\n",
    "no-text.jsonl": b'{"txt": "a [MASK]"}\n',
}


@dataclass(frozen=True)
class Case:
    id: str
    task: str                     # the export the row runs against
    argv: tuple | None            # CLI args; {dir} = the export folder, {f:NAME} = an input file
    lib: Callable | None          # lib(dir: Path, file: Callable[[str], Path]) -> anything
    error: type                   # the library's exception type
    match: str                    # regex in both the CLI line and the library message
    code: int = 2                 # CLI exit status
    damage: str | None = None     # DAMAGE applied to a copy of the export
    files: tuple = field(default=())


def _read(path):
    return read_input_file(path)


def _texts(path):
    return texts_of(_read(path), path)


def _fm(**kw):
    return lambda d, f: load(d, task=FM)("the [MASK] sat .", **kw)


def _art(match: str, damage: str, error=ArtifactError) -> Case:
    """An artifact row: the same fill-mask call, a damaged folder."""
    return Case(f"artifact-{damage}", FM, ("fill-mask", "{dir}", "the [MASK] sat ."), _fm(),
                error, match, damage=damage)


CASES = [
    # ---- the export folder ----
    Case("missing-folder", FM, ("fill-mask", "{dir}/nope", "a [MASK]"),
         lambda d, f: load(d / "nope"), ArtifactError, r"nope does not exist"),
    Case("folder-is-a-file", FM, ("fill-mask", "{dir}/config.json", "a [MASK]"),
         lambda d, f: load(d / "config.json"), ArtifactError, r"config\.json does not exist"),
    _art(r"has no bertonnx\.json", "empty"),
    _art(r"model\.onnx is damaged \(sha256", "truncated-model"),
    _art(r"model\.onnx is not an ONNX model \(truncated", "truncated-model-rehashed"),
    _art(r"model\.onnx is damaged \(sha256", "foreign-model"),
    _art(r"model\.onnx is not an ONNX model \(truncated, or a foreign", "foreign-model-rehashed"),
    _art(r"model\.onnx is missing", "model-deleted"),
    _art(r"model\.onnx is damaged \(sha256", "sha-corrupted"),
    _art(r"schema version 99, newer than .*upgrade bertonnx", "newer-version"),
    _art(r"has no schema version", "no-version"),
    _art(r"'\.\./x' escapes the export folder", "path-escape"),
    _art(r"'/etc/hostname' escapes the export folder", "absolute-path"),
    _art(r"'config\.json' escapes the export folder", "symlink-escape"),
    _art(r"bertonnx\.json is not valid JSON", "manifest-not-json"),
    _art(r"bertonnx\.json is not valid JSON", "manifest-binary"),
    _art(r"is not a manifest object", "manifest-list"),
    _art(r"lacks task", "manifest-no-task"),
    _art(r"unknown task 'summarization'", "manifest-unknown-task"),
    _art(r"wrong type: files", "manifest-files-list"),
    _art(r"does not list model\.onnx", "manifest-files-empty"),
    _art(r"wrong type: opset", "manifest-opset-str"),
    # the manifest and config.json deleted: model.onnx alone is no export, not even a folder
    # made elsewhere (runtime/core/foreign.py; one with config.json is served with a warning)
    _art(r"holds model\.onnx \(Optimum layout\) but no config\.json", "manifest-deleted"),
    _art(r"vocab\.txt is not UTF-8", "vocab-latin1"),
    _art(r"no tokenizer\.json or vocab\.txt", "no-tokenizer"),
    _art(r"tokenizer\.json cannot be read", "tokenizer-json-bad"),
    _art(r"config\.json is not a JSON object", "config-not-object"),
    _art(r"tokenizer_config\.json is not a JSON object", "tokenizer-config-list"),
    Case("task-mismatch", CLS, ("fill-mask", "{dir}", "a [MASK]"), lambda d, f: load(d, task=FM),
         TaskMismatchError, r"exported for text-classification, not fill-mask"),
    Case("task-mismatch-qa", FM, ("qa", "{dir}", "-q", "who", "-c", "the cat"),
         lambda d, f: load(d, task=QA), TaskMismatchError,
         r"exported for fill-mask, not question-answering"),
    Case("unknown-task", FM, None, lambda d, f: load(d, task="summarization"), ConfigError,
         r"unknown task 'summarization'"),
    Case("unknown-provider", FM, ("fill-mask", "{dir}", "--providers", "nosuchep", "a [MASK]"),
         lambda d, f: load(d, providers="nosuchep"), ConfigError,
         r"execution provider 'nosuchep' is not available"),
    Case("threads-negative", FM, ("fill-mask", "{dir}", "--threads", "-1", "a [MASK]"),
         lambda d, f: load(d, threads=-1), ConfigError, r"(threads|--threads).*(-1|non-negative)"),
    # ---- texts ----
    Case("no-mask-token", FM, ("fill-mask", "{dir}", "the cat sat ."),
         lambda d, f: load(d)("the cat sat ."), InputError, r"no mask token \[MASK\]"),
    Case("mask-lowercase", FM, ("fill-mask", "{dir}", "the [mask] sat ."),
         lambda d, f: load(d)("the [mask] sat ."), InputError, r"no mask token \[MASK\]"),
    Case("mask-truncated-away", FM, ("fill-mask", "{dir}", "the " * 100 + "[MASK]"),
         lambda d, f: load(d)("the " * 100 + "[MASK]"), InputError,
         r"beyond the model's 64 tokens"),
    Case("empty-text", FM, ("fill-mask", "{dir}", ""), lambda d, f: load(d)(""), InputError,
         r"is empty"),
    Case("whitespace-text", CLS, ("classify", "{dir}", " \t\n "),
         lambda d, f: load(d)(" \t\n "), InputError, r"is empty"),
    Case("empty-in-list", EMB, ("embed", "{dir}", "fine", "  "),
         lambda d, f: load(d)(["fine", "  "]), InputError, r"#1 is empty"),
    Case("not-a-string", CLS, None, lambda d, f: load(d)(42), InputError, r"int"),
    Case("list-of-non-strings", NER, None, lambda d, f: load(d)(["ok", None]), InputError,
         r"#1 is a NoneType"),
    Case("lone-surrogate", EMB, None, lambda d, f: load(d)("a \ud800 b"), InputError,
         r"lone surrogate U\+D800 at character 2"),
    Case("surrogate-in-target", FM, None,
         lambda d, f: load(d)("a [MASK]", targets=["cat", "\udfff"]), InputError,
         r"lone surrogate"),
    Case("targets-not-strings", FM, None, lambda d, f: load(d)("a [MASK]", targets=5),
         InputError, r"targets must be a word or a non-empty list of words.*got 5"),
    # blank targets are refused, not read as "no targets" (issue 31)
    Case("targets-blank", FM, ("fill-mask", "{dir}", "--targets", " , ", "a [MASK]"),
         lambda d, f: load(d)("a [MASK]", targets=[" "]), InputError,
         r"targets must (name at least one word|be a word or a non-empty list of words)"),
    Case("targets-not-in-vocab", FM, None,
         lambda d, f: load(d)("a [MASK]", targets=["\u200b"]), InputError,
         r"none of the targets maps"),
    # ---- arguments ----
    Case("top-k-zero", FM, ("fill-mask", "{dir}", "--top-k", "0", "a [MASK]"),
         lambda d, f: load(d)("a [MASK]", top_k=0), InputError, r"top.k.*(0|≥ ?1|x>=1)"),
    Case("top-k-text", FM, ("fill-mask", "{dir}", "--top-k", "abc", "a [MASK]"),
         lambda d, f: load(d)("a [MASK]", top_k="abc"), InputError, r"top.k.*'abc'"),
    Case("classify-top-k-negative", CLS, ("classify", "{dir}", "--top-k", "-1", "hi"),
         lambda d, f: load(d)("hi", top_k=-1), InputError,
         r"top.k must be an integer from 1 to 1000"),
    Case("classify-function", CLS, None,
         lambda d, f: load(d)("hi", function_to_apply="relu"), InputError,
         r"function_to_apply must be one of 'default', 'sigmoid', 'softmax', 'none'.*'relu'"),
    Case("qa-question-too-long", QA, ("qa", "{dir}", "-q", LONG_QUESTION, "-c", "the cat sat"),
         lambda d, f: load(d)(question=LONG_QUESTION, context="the cat sat"), InputError,
         r"80 tokens, more than max_question_len=64"),
    Case("qa-no-context", QA, ("qa", "{dir}", "-q", "who"),
         lambda d, f: load(d)(question="who"), InputError, r"question and .*context"),
    Case("qa-empty-context", QA, ("qa", "{dir}", "-q", "who", "-c", "   "),
         lambda d, f: load(d)(question="who", context="   "), InputError, r"context.*is empty"),
    Case("qa-context-dropped", QA, ("qa", "{dir}", "-q", "who", "-c", "\u200b\u200d"),
         lambda d, f: load(d)(question="who", context="\u200b\u200d"), InputError,
         r"context has no text the tokenizer keeps"),
    Case("qa-max-seq-len", QA, ("qa", "{dir}", "-q", "who", "-c", "cat", "--max-seq-len", "999"),
         lambda d, f: load(d)(question="who", context="cat", max_seq_len=999), InputError,
         r"max_seq_len must be an integer from 1 to 64 \(the model's limit\).*got 999"),
    Case("qa-doc-stride", QA, ("qa", "{dir}", "-q", "who", "-c", "cat", "--doc-stride", "60"),
         lambda d, f: load(d)(question="who", context="cat", doc_stride=60), InputError,
         r"doc_stride=60 must be smaller"),
    Case("qa-bad-dict", QA, None, lambda d, f: load(d)([{"question": "who"}]), InputError,
         r"input #0 is not a \{question, context\} dict"),
    Case("qa-count-mismatch", QA, None,
         lambda d, f: load(d)(question=["a", "b"], context=["c"]), InputError,
         r"2 questions but 1 contexts"),
    Case("ner-stride", NER, ("tokens", "{dir}", "--stride", "62", "hi"),
         lambda d, f: load(d)("hi", stride=62), InputError, r"stride must be an integer from 0 to 61 \(the model's limit\).*got 62"),
    Case("ner-aggregation", NER, ("tokens", "{dir}", "--aggregation", "mean", "hi"),
         lambda d, f: load(d)("hi", aggregation_strategy="mean"), InputError,
         r"'mean'"),
    Case("embed-pooling", EMB, ("embed", "{dir}", "--pooling", "maximum", "hi"),
         lambda d, f: load(d)("hi", pooling="maximum"), InputError, r"'maximum'"),
    Case("embed-normalize-none", EMB, None,
         lambda d, f: load(d)("hi", pooling="none", normalize=True), InputError,
         r"normalize needs a pooled vector"),
    # absurd knobs: onnxruntime gave a pybind traceback (10^11 threads) or blamed the export
    # (2^31 - 1 threads: std::bad_alloc); a batch size past any memory
    Case("threads-absurd", FM, ("fill-mask", "{dir}", "--threads", "100000000000", "a [MASK]"),
         lambda d, f: load(d, threads=10**11), ConfigError,
         r"threads.*100000000000.*(0<=x<=1024|0 to 1024)"),
    Case("threads-int32-max", FM, ("fill-mask", "{dir}", "--threads", "2147483647", "a [MASK]"),
         lambda d, f: load(d, threads=2**31 - 1), ConfigError,
         r"threads.*2147483647.*(0<=x<=1024|0 to 1024)"),
    Case("batch-size-absurd", CLS, ("classify", "{dir}", "--batch-size", "100000000000", "hi"),
         lambda d, f: load(d)("hi", batch_size=10**11), InputError,
         r"batch.size.*(100000000000.*1<=x<=4096|1 to 4096.*100000000000)"),
    Case("batch-size-absurd-at-load", CLS, None, lambda d, f: load(d, batch_size=10**11),
         InputError, r"batch size 100000000000 is not an integer from 1 to 4096"),
    # parameters by type and range (they gave 500s from the server, or were misread)
    Case("qa-max-seq-len-text", QA, None,
         lambda d, f: load(d)(question="who", context="cat", max_seq_len="x"), InputError,
         r"max_seq_len must be an integer from 1 to 64 .*got 'x'"),
    Case("qa-max-answer-len-float", QA, None,
         lambda d, f: load(d)(question="who", context="cat", max_answer_len=1e30), InputError,
         r"max_answer_len must be an integer from 1 to 2147483647, got 1e\+30"),
    Case("qa-max-answer-len-huge", QA, None,
         lambda d, f: load(d)(question="who", context="cat", max_answer_len=10**30), InputError,
         r"max_answer_len must be an integer from 1 to 2147483647"),
    Case("qa-impossible-a-string", QA, None,
         lambda d, f: load(d)(question="who", context="cat", handle_impossible_answer="false"),
         InputError, r"handle_impossible_answer must be true or false, got 'false'"),
    Case("qa-align-a-number", QA, None,
         lambda d, f: load(d)(question="who", context="cat", align_to_words=0), InputError,
         r"align_to_words must be true or false, got 0"),
    Case("qa-top-k-bool", QA, None,
         lambda d, f: load(d)(question="who", context="cat", top_k=True), InputError,
         r"top_k must be an integer from 1 .*got True"),
    Case("ner-ignore-labels-number", NER, None, lambda d, f: load(d)("hi", ignore_labels=-1),
         InputError, r"ignore_labels must be a list of strings or null, got -1"),
    Case("ner-ignore-labels-string", NER, None, lambda d, f: load(d)("hi", ignore_labels="PER"),
         InputError, r"ignore_labels must be a list of strings or null, got 'PER'"),
    Case("ner-aggregation-number", NER, None,
         lambda d, f: load(d)("hi", aggregation_strategy=5), InputError,
         r"aggregation_strategy must be one of .*got 5"),
    Case("embed-normalize-string", EMB, None, lambda d, f: load(d)("hi", normalize="false"),
         InputError, r"normalize must be true or false, got 'false'"),
    Case("embed-return-tensors-number", EMB, None,
         lambda d, f: load(d)("hi", return_tensors=1), InputError,
         r"return_tensors must be true or false, got 1"),
    Case("batch-size-zero", CLS, ("classify", "{dir}", "--batch-size", "0", "hi"),
         lambda d, f: load(d)("hi", batch_size=0), InputError, r"batch.size.*(0|≥ 1|x>=1)"),
    # ---- input files ----
    Case("file-latin1", FM, ("fill-mask", "{dir}", "--input", "{f:latin1.txt}"),
         lambda d, f: _read(f("latin1.txt")), InputError,
         r"is not UTF-8 \(byte 0xe9 on line 1\)", files=("latin1.txt",)),
    Case("file-surrogate-bytes", FM, ("fill-mask", "{dir}", "--input", "{f:surrogate-bytes.txt}"),
         lambda d, f: _read(f("surrogate-bytes.txt")), InputError, r"is not UTF-8 \(byte 0xed",
         files=("surrogate-bytes.txt",)),
    Case("file-surrogate-json", FM, ("fill-mask", "{dir}", "--input", "{f:surrogate.jsonl}"),
         lambda d, f: load(d)(_texts(f("surrogate.jsonl"))), InputError,
         r"lone surrogate U\+D83D", files=("surrogate.jsonl",)),
    Case("file-blank-bom-crlf", FM, ("fill-mask", "{dir}", "--input", "{f:blank-crlf.txt}"),
         lambda d, f: _read(f("blank-crlf.txt")), InputError, r"has no inputs",
         files=("blank-crlf.txt",)),
    Case("file-bad-jsonl", FM, ("fill-mask", "{dir}", "--input", "{f:bad.jsonl}"),
         lambda d, f: _read(f("bad.jsonl")), InputError, r"line 2 is not valid JSON",
         files=("bad.jsonl",)),
    Case("file-jsonl-number", FM, ("fill-mask", "{dir}", "--input", "{f:number.jsonl}"),
         lambda d, f: _read(f("number.jsonl")), InputError, r"line 2 holds a int",
         files=("number.jsonl",)),
    Case("file-no-text-field", FM, ("fill-mask", "{dir}", "--input", "{f:no-text.jsonl}"),
         lambda d, f: _texts(f("no-text.jsonl")), InputError, r"has no \"text\" string",
         files=("no-text.jsonl",)),
    Case("file-missing", FM, ("fill-mask", "{dir}", "--input", "{dir}/nope.txt"),
         lambda d, f: _read(d / "nope.txt"), InputError, r"nope\.txt does not exist"),
    Case("qa-file-plain-text", QA, ("qa", "{dir}", "--input", "{f:qa-plain.txt}"), None,
         InputError, r"must hold JSON objects with question and context",
         files=("qa-plain.txt",)),
    # ---- CLI-only usage mistakes (click's own errors, made one line) ----
    Case("cli-both-text-and-file", FM,
         ("fill-mask", "{dir}", "--input", "{f:bad.jsonl}", "a [MASK]"), None, InputError,
         r"not both", files=("bad.jsonl",)),
    Case("cli-no-text", FM, ("fill-mask", "{dir}"), None, InputError, r"no input text"),
    Case("cli-pair-with-two-texts", CLS, ("classify", "{dir}", "--pair", "b", "a", "c"), None,
         InputError, r"--pair goes with exactly one TEXT"),
    Case("cli-unknown-command", FM, ("summarize", "{dir}"), None, InputError,
         r"No such command 'summarize'"),
    Case("cli-unknown-option", FM, ("fill-mask", "{dir}", "--topk", "3", "a [MASK]"), None,
         InputError, r"No such option '--topk'"),
    Case("cli-missing-dir", FM, ("classify",), None, InputError, r"Missing argument 'DIR'"),
    Case("cli-bad-choice", CLS, ("classify", "{dir}", "--function", "relu", "hi"), None,
         InputError, r"'relu' is not one of"),
]
