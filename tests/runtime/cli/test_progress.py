"""Progress: a bar on a terminal, whole rate-limited lines anywhere else (no carriage returns)."""
from __future__ import annotations

import io

from bertonnx.runtime.cli.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    p = Progress(10, "train", stream=out, every=0.0)
    for _ in range(10):
        p.set_postfix(loss="1.5")
        p.update()
    p.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 11  # one per update (every=0) and one at the end
    assert lines[-1].startswith("train: 10/10 steps (100.0%), loss=1.5")


def test_rate_limited_lines():
    out = io.StringIO()
    p = Progress(1000, "train", stream=out, every=3600.0)
    for _ in range(1000):
        p.update()
    p.close()
    assert out.getvalue().splitlines() == [out.getvalue().splitlines()[-1]]  # only the final one
    assert "1000/1000" in out.getvalue()


def test_bar_on_a_terminal_and_silence_when_disabled():
    tty = Terminal()
    p = Progress(5, "train", stream=tty)
    p.update(5)
    p.close()
    assert "\r" in tty.getvalue() and "5/5" in tty.getvalue()  # tqdm's redraws
    quiet = io.StringIO()
    q = Progress(5, "train", stream=quiet, enabled=False, every=0.0)
    q.update(5)
    q.close()
    assert quiet.getvalue() == ""
