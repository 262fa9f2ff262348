"""Artifact integrity and security: every file of an export is vouched for by sha256, manifest
paths cannot leave the folder, exports never overwrite without --force, and no code path in the
packages unpickles or evaluates untrusted input.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bertonnx.runtime import ArtifactError, load
from bertonnx.runtime.core.contract import MANIFEST_NAME
from bertonnx.runtime.core.manifest import Manifest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "export", "build")


def _sources(package: str) -> list[Path]:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    return files


# -- security: no pickle, no eval/exec, torch.load only with weights_only=True --------------

def _code_lines(path: Path):
    """(line number, code) with comments and string-only lines dropped."""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip() and not re.match(r"\s*[rbuf]*[\"']", code):
            yield n, code


def test_runtime_never_unpickles_or_evaluates():
    bad = re.compile(r"\b(import\s+pickle|from\s+pickle|pickle\.|cPickle|dill|joblib|marshal\.loads"
                     r"|torch\.load|(?<![.\w])eval\(|(?<![.\w])exec\(|__import__\(|allow_pickle"
                     r"\s*=\s*True)")
    hits = [f"{p.relative_to(REPO)}:{n}: {c.strip()}" for p in _sources("runtime")
            for n, c in _code_lines(p) if bad.search(c)]
    assert not hits, "\n".join(hits)


def test_torch_load_always_weights_only():
    hits = []
    for pkg in PACKAGES:
        for p in _sources(pkg):
            text = p.read_text(encoding="utf-8")
            for m in re.finditer(r"torch\.load\(", text):
                call = text[m.start():text.find(")", m.end()) + 1]
                if "weights_only=True" not in call:
                    hits.append(f"{p.relative_to(REPO)}: {call}")
    assert not hits, "\n".join(hits)


def test_no_eval_exec_or_numpy_pickle_anywhere():
    bad = re.compile(r"(?<![.\w])(eval|exec)\(|allow_pickle\s*=\s*True|pickle\.loads?\(")
    hits = [f"{p.relative_to(REPO)}:{n}: {c.strip()}" for pkg in PACKAGES for p in _sources(pkg)
            for n, c in _code_lines(p) if bad.search(c)]
    assert not hits, "\n".join(hits)


# -- sha256 covers every file ----------------------------------------------------------------

@pytest.fixture(scope="module")
def export(tiny_export):
    return tiny_export("text-classification")


def test_every_file_is_recorded(export):
    recorded = set(Manifest.read(export).files)
    on_disk = {p.relative_to(export).as_posix() for p in export.rglob("*") if p.is_file()}
    assert recorded == on_disk - {MANIFEST_NAME}


def test_a_flipped_byte_in_any_file_is_named(export, tmp_path):
    files = sorted(Manifest.read(export).files)
    assert len(files) >= 4
    for name in files:
        d = tmp_path / name.replace("/", "_")
        shutil.copytree(export, d)
        data = bytearray((d / name).read_bytes())
        data[len(data) // 2] ^= 0x01
        (d / name).write_bytes(bytes(data))
        with pytest.raises(ArtifactError, match=re.escape(f"{name} is damaged")):
            load(d)


# -- manifest paths cannot escape ------------------------------------------------------------

segment = st.sampled_from(["..", ".", "a", "b.onnx", "", "~", "...", "..\\..", "%2e%2e"])


@settings(max_examples=100, deadline=None, database=None)
@given(parts=st.lists(segment, min_size=1, max_size=6), absolute=st.booleans())
def test_manifest_paths_stay_inside(tmp_path_factory, parts, absolute):
    """Any path that resolves outside the folder is refused; any refused path is outside."""
    root = tmp_path_factory.mktemp("paths")
    folder = root / "x" / "export"
    folder.mkdir(parents=True)
    rel = ("/" if absolute else "") + "/".join(parts)
    m = Manifest(task="fill-mask", opset=17, exporter="", inputs={}, outputs={}, optimized=False,
                 quantization={}, fused_ops={}, parity={}, config={}, files={rel: "0" * 64})
    target = (folder / rel).resolve()
    inside = folder.resolve() in target.parents
    if inside and not Path(rel).is_absolute():
        m.check_paths(folder)
    else:
        with pytest.raises(ArtifactError, match="escapes the export folder"):
            m.check_paths(folder)


# -- exports never overwrite without --force ------------------------------------------------

def test_export_refuses_a_non_empty_folder(tiny_checkpoint, tmp_path):
    from bertonnx.export import ExportOptions, export_model

    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(ArtifactError, match="is not empty.*--force"):
        export_model(tiny_checkpoint("fill-mask"), "fill-mask", out, ExportOptions(parity=False))
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert not list(tmp_path.glob(".precious.*")), "a refused export left a temporary folder"


def test_export_cli_refuses_a_non_empty_folder(tiny_checkpoint, tmp_path, run_cli):
    from .conftest import one_error_line

    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    proc = run_cli("export", tiny_checkpoint("fill-mask"), "--task", "fill-mask", "--out", out)
    assert proc.returncode == 2
    assert "is not empty" in one_error_line(proc)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_failed_check_exits_1(tiny_export, tiny_checkpoint, run_cli):
    """`parity` against another checkpoint: the report is printed, then one line, exit 1."""
    from .conftest import one_error_line

    proc = run_cli("parity", tiny_export("fill-mask"), "--reference",
                   tiny_checkpoint("fill-mask", seed=1), "--json")
    assert proc.returncode == 1
    assert "outside tolerance" in one_error_line(proc)
    report = json.loads(proc.stdout)
    assert report["passed"] is False


def test_export_cli_unwritable_out_is_one_line(tiny_checkpoint, tmp_path, run_cli):
    """An --out under a file (or without permission) is the user's path, not a crash."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    proc = run_cli("export", tiny_checkpoint("fill-mask"), "--task", "fill-mask",
                   "--out", blocker / "sub" / "out", "--no-parity")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err, err
    # export's progress lines come first; the error is the last line, and the only one
    errors = [ln for ln in err.splitlines() if ln.startswith("bertonnx: error:")]
    assert errors == [err.strip().splitlines()[-1]] and str(blocker) in errors[0], err
