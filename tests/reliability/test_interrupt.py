"""An interrupted export never leaves a folder that looks complete, and a re-run succeeds.

`bertonnx export` runs in a subprocess that is killed part-way: SIGKILL (no cleanup can run)
as soon as its hidden temporary folder appears, and again once model.onnx is in it; SIGINT
(Ctrl-C: cleanup runs). Afterwards the target folder either does not exist or holds no
manifest, `load` refuses it, and the same export run again completes. An interrupted
`--force` export leaves the previous export intact. Scratch (the raw graph, the optimizer's and
the quantizer's copies) lives inside the hidden folder, never in the temp directory, so the
re-run removes it too. A second export to the same --out while one runs fails at once.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertonnx.runtime import ArtifactError, load
from bertonnx.runtime.core.contract import MANIFEST_NAME, MODEL_NAME
from bertonnx.runtime.core.manifest import Manifest

from .conftest import _cli_env


def _partials(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.partial-*"))


# The export runs in a subprocess that stops itself at a named point and waits there for the
# test's signal: no race between the test's polling and a tiny model's fast export.
_PAUSING_EXPORT = """
import pathlib, signal, sys, time
from bertonnx.export import api, graph
from bertonnx.runtime.cli import main

# A shell that started the test run in the background leaves SIGINT ignored in every child,
# and Python then installs no KeyboardInterrupt handler; Ctrl-C in a terminal reaches a
# foreground process that has it. Model that process.
signal.signal(signal.SIGINT, signal.default_int_handler)

flag, point = pathlib.Path(sys.argv[1]), sys.argv[2]

def pause():
    flag.write_text(point)
    while True:  # until the test's signal arrives
        time.sleep(60)

def after(module, name):  # pause right after module.name returns (its files written)
    original = getattr(module, name)
    def then_pause(*a, **k):
        original(*a, **k)
        pause()
    setattr(module, name, then_pause)

if point == "temp":  # the hidden temporary folder exists, empty
    api._build = lambda *a, **k: pause()
elif point == "model":  # model.onnx is written into it, the manifest is not
    after(graph, "save_model")
elif point == "fuse":  # the optimizer has fused the exporter's graph (raw.onnx)
    import onnxruntime.transformers.optimizer as optimizer
    after(optimizer, "optimize_by_fusion")
elif point == "int8":  # the quantizer has written the int8 graph
    import onnxruntime.quantization as quantization
    after(quantization, "quantize_dynamic")
elif point == "adopt":  # `bertonnx adopt` holds the lock on --out, nothing written yet
    from bertonnx.export import adopt
    adopt._adopt = lambda *a, **k: pause()
sys.exit(main(sys.argv[3:]))
"""


def _start_paused(ckpt: Path, out: Path, point: str, *extra, env=None,
                  argv: list[str] | None = None) -> subprocess.Popen:
    """`bertonnx export` (or the command `argv`) in a subprocess, returned once it is paused
    at `point`."""
    flag = out.parent / f"paused-{point}"
    argv = argv or ["export", str(ckpt), "--task", "fill-mask", "--out", str(out),
                    "--no-parity", *extra]
    proc = subprocess.Popen([sys.executable, "-c", _PAUSING_EXPORT, str(flag), point, *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env or _cli_env())
    deadline = time.monotonic() + 240
    try:
        while not flag.exists():
            assert proc.poll() is None, f"export ended before the kill point: " \
                                        f"{proc.stderr.read().decode()[-1000:]}"
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.02)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def _export_and_interrupt(ckpt: Path, out: Path, sig: int, point: str, *extra,
                          env=None) -> tuple[int, bytes]:
    """Start `bertonnx export`, send `sig` once it is paused at `point`; (exit status, stderr)."""
    proc = _start_paused(ckpt, out, point, *extra, env=env)
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def _export(ckpt: Path, out: Path, *extra, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "export", str(ckpt),
                           "--task", "fill-mask", "--out", str(out), "--no-parity", *extra],
                          capture_output=True, env=env or _cli_env(), timeout=300)


def _assert_not_complete(out: Path) -> None:
    assert not (out / MANIFEST_NAME).exists(), "an interrupted export looks complete"
    with pytest.raises(ArtifactError):
        load(out)


@pytest.mark.parametrize("point", ["temp", "model"])
def test_sigkill_leaves_nothing_that_looks_complete(tiny_checkpoint, tmp_path, point):
    ckpt, out = tiny_checkpoint("fill-mask"), tmp_path / "export"
    rc, _ = _export_and_interrupt(ckpt, out, signal.SIGKILL, point)
    if point == "model":
        assert any((p / MODEL_NAME).is_file() for p in _partials(out))
    assert rc == -signal.SIGKILL
    _assert_not_complete(out)
    # what SIGKILL leaves behind is only the hidden temporary folder, never `out` itself
    assert not out.exists() and _partials(out)
    rerun = subprocess.run([sys.executable, "-m", "bertonnx.runtime.cli", "export", str(ckpt),
                            "--task", "fill-mask", "--out", str(out), "--no-parity"],
                           capture_output=True, env=_cli_env(), timeout=300)
    assert rerun.returncode == 0, rerun.stderr.decode()[-1000:]
    assert load(out)("the [MASK] sat .")[0]["token_str"]
    assert not _partials(out), "the re-run left the killed export's temp folder behind"


def test_ctrl_c_cleans_up(tiny_checkpoint, tmp_path):
    ckpt, out = tiny_checkpoint("fill-mask"), tmp_path / "export"
    rc, err = _export_and_interrupt(ckpt, out, signal.SIGINT, "temp")
    assert rc == 130, err.decode()[-1000:]
    # click turns KeyboardInterrupt into Abort: "aborted" (cli.main says "interrupted" if not)
    assert b"Traceback" not in err
    assert err.decode().strip().splitlines()[-1] in ("bertonnx: aborted", "bertonnx: interrupted")
    assert not out.exists() and not _partials(out), "Ctrl-C left files behind"


def test_sigkill_during_force_keeps_the_previous_export(tiny_checkpoint, tiny_export, tmp_path):
    import shutil

    out = tmp_path / "export"
    shutil.copytree(tiny_export("fill-mask"), out)
    before = Manifest.read(out).files
    answer = load(out)("the [MASK] sat .")
    rc, _ = _export_and_interrupt(tiny_checkpoint("fill-mask", seed=1), out, signal.SIGKILL,
                                  "model", "--force")
    assert rc == -signal.SIGKILL
    assert Manifest.read(out).files == before          # sha256-verified, unchanged
    assert load(out)("the [MASK] sat .") == answer


def _temp_files(temp: Path) -> list[str]:
    # `.ses`: the session id onnxruntime writes into the temp directory when imported
    return sorted(p.relative_to(temp).as_posix() for p in temp.rglob("*") if p.name != ".ses")


@pytest.mark.parametrize("point, extra, scratch", [
    ("fuse", (), {"raw.onnx"}),                  # the exporter's graph, being fused
    # the graph handed to the quantizer (its weights beside it) and the quantizer's output
    ("int8", ("--quantize", "int8"), {"fused.onnx", "int8.onnx"}),
])
def test_sigkill_leaves_no_scratch_in_the_temp_directory(tiny_checkpoint, tmp_path, point, extra,
                                                        scratch):
    """The export's scratch (raw.onnx and the tools' copies) is inside its hidden folder, so
    the temp directory stays empty and the next export removes the lot."""
    ckpt, out = tiny_checkpoint("fill-mask"), tmp_path / "export"
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    env = {**_cli_env(), "TMPDIR": str(temp)}
    rc, _ = _export_and_interrupt(ckpt, out, signal.SIGKILL, point, *extra, env=env)
    assert rc == -signal.SIGKILL
    left = _temp_files(temp)
    assert left == [], f"scratch in the temp directory: {left}"
    inside = {p.name for part in _partials(out) for p in part.rglob("*.onnx")}
    assert scratch <= inside, inside
    rerun = _export(ckpt, out, *extra, env=env)
    assert rerun.returncode == 0, rerun.stderr.decode()[-1000:]
    assert not _partials(out) and _temp_files(temp) == []
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".onnx") == [MODEL_NAME]


def test_a_second_export_to_the_same_out_fails_at_once(tiny_checkpoint, tmp_path):
    """Two exports racing to one --out: the second is refused in one line while the first
    holds the lock; once the first is gone (even by SIGKILL) the lock is free again."""
    ckpt, out = tiny_checkpoint("fill-mask"), tmp_path / "export"
    first = _start_paused(ckpt, out, "temp")
    try:
        t0 = time.monotonic()
        second = _export(ckpt, out)
        took = time.monotonic() - t0
        err = second.stderr.decode()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        # one line and nothing else: it failed before its first step ("loading ...")
        assert second.returncode == 2 and len(lines) == 1, err
        assert lines[0].startswith(f"bertonnx: error: another export or adopt is writing {out} "
                                   f"(pid {first.pid} holds"), lines[0]
        print(f"second export refused in {took:.2f} s (process start and imports included)")
    finally:
        first.kill()
        first.wait()
    third = _export(ckpt, out)
    assert third.returncode == 0, third.stderr.decode()[-1000:]
    assert load(out)("the [MASK] sat .")
    assert not out.with_name(f".{out.name}.lock").exists(), "the lock file was left behind"
    assert not _partials(out)


def test_adopt_takes_the_same_lock_as_export(tiny_checkpoint, tmp_path, run_cli):
    """`bertonnx adopt` holds the --out lock as export does: while one adopt holds it, a
    second adopt and an export to the same --out each fail at once in one line; once it is
    gone (SIGKILL) the lock is free and an adopt completes."""
    from tests.conftest import FM, make_foreign_export

    from .conftest import one_error_line

    foreign = make_foreign_export(tiny_checkpoint(FM), tmp_path / "optimum", FM)
    out = tmp_path / "adopted"
    adopt = ["adopt", str(foreign), "--out", str(out)]
    first = _start_paused(foreign, out, "adopt", argv=adopt)
    try:
        for argv in (adopt, ["export", tiny_checkpoint(FM), "--task", FM, "--out", out,
                             "--no-parity"]):
            second = run_cli(*argv)
            assert second.returncode == 2, second.stderr.decode()
            assert one_error_line(second).startswith(
                f"bertonnx: error: another export or adopt is writing {out} "
                f"(pid {first.pid} holds"), argv[0]
    finally:
        first.kill()
        first.wait()
    again = run_cli(*adopt)
    assert again.returncode == 0, again.stderr.decode()[-1000:]
    assert load(out)("the [MASK] sat .")
    assert not out.with_name(f".{out.name}.lock").exists(), "the lock file was left behind"
    assert not _partials(out)
