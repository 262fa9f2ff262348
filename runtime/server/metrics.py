"""Prometheus text for GET /metrics: requests by status, latency and batch-size histograms,
queue depth, and what clients did to the server: disconnects (not 5xx: no answer was owed),
timeouts and refused connections. Hand-written (a few dozen lines) rather than a client library: the format is
stable and the runtime stays at numpy, onnxruntime, tokenizers and click."""
from __future__ import annotations

import threading
from dataclasses import dataclass

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class _Histogram:
    def __init__(self, buckets):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)   # per bucket, not cumulative
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break
        self.total += 1
        self.sum += value

    def render(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {running}')
        lines.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.total}')
        suffix = f"{{{labels}}}" if labels else ""
        lines.append(f"{name}_sum{suffix} {self.sum:.9g}")
        lines.append(f"{name}_count{suffix} {self.total}")
        return lines


class Metrics:
    """Counters and histograms for /metrics; batch hooks run on worker threads, hence the lock."""

    def __init__(self):
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {}
        self.latency = _Histogram(_LATENCY_BUCKETS)
        self.batch_inputs = _Histogram(_SIZE_BUCKETS)
        self.batch_requests = _Histogram(_SIZE_BUCKETS)
        self.batch_seconds = _Histogram(_LATENCY_BUCKETS)
        self.batch_max = 0
        self.in_flight = 0
        self.disconnects: dict[str, int] = {}    # stage -> clients gone before their answer
        self.timeouts: dict[str, int] = {}       # stage -> connections timed out
        self.refused = 0                          # connections refused past --max-connections
        self.open_connections = 0                 # kept by the protocol (event-loop thread)

    def client_gone(self, stage: str) -> None:
        with self._lock:
            self.disconnects[stage] = self.disconnects.get(stage, 0) + 1

    def timed_out(self, stage: str) -> None:
        with self._lock:
            self.timeouts[stage] = self.timeouts.get(stage, 0) + 1

    def connection_refused(self) -> None:
        with self._lock:
            self.refused += 1

    def request_done(self, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[str(status)] = self.requests.get(str(status), 0) + 1
            self.latency.observe(seconds)

    def batch_done(self, inputs: int, requests: int, seconds: float) -> None:
        with self._lock:
            self.batch_inputs.observe(inputs)
            self.batch_requests.observe(requests)
            self.batch_seconds.observe(seconds)
            self.batch_max = max(self.batch_max, inputs)

    @staticmethod
    def parse(text: str) -> dict[str, float]:
        """`render`'s text read back: sample (name with labels) -> value; for clients."""
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def render(self, *, ready: bool, queued: int, inputs: int = 0,
               engine: tuple[str, str] | None = None,
               models: list[ModelRows] | None = None) -> str:
        """The text; with `models` (several served), each model's families carry its name
        as the `model` label (requests named by no model: model=""), the server's do not."""
        if models is None:
            rows = self._rows("", ready, queued, engine, own=True)
        else:
            rows = self._rows('model=""', ready, queued, None, own=False)
            for m in models:   # each model's lines under its family's row
                for row, more in zip(rows, m.metrics._rows(f"model={_quote(m.name)}", m.ready,
                                                           m.queued, m.engine, own=False)):
                    row[3].extend(more[3])
        p = "bertonnx"
        server = {"in_flight_requests": [f"{p}_in_flight_requests {self.in_flight}"],
                  "queued_inputs": [f"{p}_queued_inputs {inputs}"]}
        out = []
        for name, kind, text, lines in rows:
            lines = server.get(name, lines)
            if lines or name != "engine_info":   # no engine (a test's pipeline): no row
                out += [f"# HELP {p}_{name} {text}", f"# TYPE {p}_{name} {kind}", *lines]
        return "\n".join(out) + "\n"

    def _rows(self, label: str, ready: bool, queued: int, engine, own: bool) -> list:
        """(name, type, help, sample lines) per metric, Prometheus text format 0.0.4, with
        `label` on the samples of the per-model families; `own`: this object holds the
        server-wide counters too (one model served), else they are left empty here."""
        p, sep = "bertonnx", "," if label else ""
        braces = f"{{{label}}}" if label else ""
        server = own or label == 'model=""'
        with self._lock:
            rows = [
                ("requests_total", "counter", "Prediction requests answered, by HTTP status.",
                 [f'{p}_requests_total{{{label}{sep}status="{s}"}} {n}'
                  for s, n in sorted(self.requests.items())]),
                ("request_duration_seconds", "histogram", "Time from request to answer.",
                 self.latency.render(f"{p}_request_duration_seconds", label)
                 if not server or own or self.latency.total else []),
                ("batch_size", "histogram", "Inputs per pipeline call.",
                 self.batch_inputs.render(f"{p}_batch_size", label) if not server or own
                 else []),
                ("batch_requests", "histogram", "Requests merged into one pipeline call.",
                 self.batch_requests.render(f"{p}_batch_requests", label) if not server or own
                 else []),
                ("batch_duration_seconds", "histogram", "Time of one pipeline call.",
                 self.batch_seconds.render(f"{p}_batch_duration_seconds", label)
                 if not server or own else []),
                ("batch_size_max", "gauge", "Largest batch so far.",
                 [f"{p}_batch_size_max{braces} {self.batch_max}"] if not server or own
                 else []),
                ("in_flight_requests", "gauge", "Requests received and not yet answered.", []),
                ("client_disconnects_total", "counter",
                 "Requests whose client went away before the answer, by stage (reading the "
                 "body, waiting for the model); their work is dropped.",
                 [f'{p}_client_disconnects_total{{stage="{k}"}} {n}'
                  for k, n in sorted(self.disconnects.items())] if server else []),
                ("timeouts_total", "counter",
                 "Clients too slow: headers past --header-timeout-s (connection closed), "
                 "bodies past --body-timeout-s (408); requests not answered within "
                 "--request-timeout-s (stage request, 503).",
                 [f'{p}_timeouts_total{{stage="{k}"}} {n}'
                  for k, n in sorted(self.timeouts.items())] if server else []),
                ("connections_refused_total", "counter",
                 "Connections answered 503 at connect, past --max-connections.",
                 [f"{p}_connections_refused_total {self.refused}"] if server else []),
                ("open_connections", "gauge", "Client connections open now.",
                 [f"{p}_open_connections {self.open_connections}"] if server else []),
                ("queue_depth", "gauge",
                 "Requests (parts of --part-size inputs) waiting to run: queued, or in the batch "
                 "being formed.",
                 [f"{p}_queue_depth{braces} {queued}"] if not server or own else []),
                ("queued_inputs", "gauge",
                 "Inputs of admitted requests not yet answered (queued or running); past "
                 "--max-queued-inputs a request is answered 429.", []),
                ("model_ready", "gauge", "1 once the model answers.",
                 [f"{p}_model_ready{braces} {int(ready)}"] if not server or own else []),
            ]
            # an info metric: which engine and precision answer
            rows.append(("engine_info", "gauge",
                         "The engine the model runs on (runtime/core/engines.py).",
                         [f'{p}_engine_info{{{label}{sep}engine="{engine[0]}",precision='
                          f'"{engine[1]}"}} 1'] if engine is not None else []))
        return rows


@dataclass(frozen=True)
class ModelRows:
    """One served model's part of /metrics: its counters and gauges."""

    name: str
    metrics: Metrics
    ready: bool
    queued: int
    engine: tuple[str, str] | None


def _quote(value: str) -> str:
    """A Prometheus label value (model names hold no quote or backslash: settings._NAME)."""
    return f'"{value}"'
