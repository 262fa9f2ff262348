"""An interrupted export never leaves a folder that looks complete, and a re-run succeeds.

`bertonnx export` runs in a subprocess that is killed part-way: SIGKILL (no cleanup can run)
as soon as its hidden temporary folder appears, and again once model.onnx is in it; SIGINT
(Ctrl-C: cleanup runs). Afterwards the target folder either does not exist or holds no
manifest, `load` refuses it, and the same export run again completes. An interrupted
`--force` export leaves the previous export intact.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertonnx.runtime import ArtifactError, load
from bertonnx.runtime.contract import MANIFEST_NAME, MODEL_NAME
from bertonnx.runtime.manifest import Manifest

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

if point == "temp":  # the hidden temporary folder exists, empty
    api._build = lambda *a, **k: pause()
else:  # "model": model.onnx is written into it, the manifest is not
    save_model = graph.save_model
    def saved_then_pause(*a, **k):
        save_model(*a, **k)
        pause()
    graph.save_model = saved_then_pause
sys.exit(main(sys.argv[3:]))
"""


def _export_and_interrupt(ckpt: Path, out: Path, sig: int, point: str, *extra) -> tuple[int, bytes]:
    """Start `bertonnx export`, send `sig` once it is paused at `point`; (exit status, stderr)."""
    flag = out.parent / f"paused-{point}"
    proc = subprocess.Popen([sys.executable, "-c", _PAUSING_EXPORT, str(flag), point, "export",
                             str(ckpt), "--task", "fill-mask", "--out", str(out), "--no-parity",
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_cli_env())
    deadline = time.monotonic() + 240
    try:
        while not flag.exists():
            assert proc.poll() is None, f"export ended before the kill point: " \
                                        f"{proc.stderr.read().decode()[-1000:]}"
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


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
