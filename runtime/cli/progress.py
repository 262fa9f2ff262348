"""Progress of long work on stderr: a tqdm bar on a terminal, plain lines in logs.

tqdm redraws its bar with carriage returns, which a log file or CI console keeps as one
endless line; so when stderr is not a terminal (or tqdm is not installed: it comes with the
torch extra) the same progress is written as whole lines, at most one per `every` seconds,
plus one at the end. A total of None (not known cheaply, e.g. a CSV file's rows) gives counts
and rates without a percentage or ETA; `rate=True` adds the rate (rows/s) to the lines.
"""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int | None, desc: str, *, initial: int = 0, enabled: bool = True,
                 stream=None, every: float = 30.0, unit: str = "step", rate: bool = False):
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.rate = rate
        self.stream = stream or sys.stderr
        self.enabled, self.every = enabled, every
        self.postfix: dict[str, str] = {}
        self.bar = None
        self.start = self.last = time.monotonic()
        self.initial = initial
        if enabled and self.stream.isatty():
            try:  # tqdm is optional (the torch extra) and drawn only on a terminal
                from tqdm import tqdm
            except ImportError:
                return
            self.bar = tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True,
                            file=self.stream, unit=unit)

    def set_postfix(self, **fields) -> None:
        self.postfix = {k: str(v) for k, v in fields.items()}
        if self.bar is not None:
            self.bar.set_postfix(**self.postfix)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.monotonic() - self.last >= self.every:
            self._line()

    def line(self) -> str:
        """`desc: 120/1800 steps (6.7%), loss=3.2, ETA 38m12s` — what a log line says."""
        done = self.n - self.initial
        elapsed = time.monotonic() - self.start
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        pct = f" ({100 * self.n / self.total:.1f}%)" if self.total else ""
        speed = f", {done / elapsed:.0f} {self.unit}s/s" if self.rate and elapsed > 0 else ""
        eta = ""
        if done > 0 and self.total:
            left = (self.total - self.n) * elapsed / done
            eta = f", ETA {int(left // 60)}m{int(left % 60):02d}s"
        extra = "".join(f", {k}={v}" for k, v in self.postfix.items())
        return f"{self.desc}: {count} {self.unit}s{pct}{extra}{speed}{eta}"

    def _line(self) -> None:
        self.last = time.monotonic()
        print(self.line(), file=self.stream, flush=True)

    def close(self, final_line: bool = True) -> None:
        """Ends the bar; in plain mode writes the final line (not after a failure, whose
        one-line error then stands alone)."""
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and final_line:
            self._line()
