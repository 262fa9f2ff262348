"""`bertonnx serve DIR --engine triton`: the export on a real Triton server, in one command.

Writes the pipeline model (pipeline_repository.py, the export linked, not copied) into a scratch
repository (one model per export: `serve A B --engine triton` serves both), starts the bundled
tritonserver on it (launch.py), announces its address once it is ready, forwards SIGINT/SIGTERM
to it, and when it exits removes the scratch folder and any shared memory its stubs left. A
model is named as `bertonnx serve` names it (--name, else the export folder's name) and speaks
the same Open Inference Protocol tensors as bertonnx's /v2.
"""
from __future__ import annotations

import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.defaults import resolve_export
from ..core.foreign import read_manifest
from .launch import Ports, TritonServer
from .repository import TritonOptions, write_repository


@dataclass(frozen=True)
class TritonServeOptions:
    host: str = "127.0.0.1"
    port: int = 8000                 # HTTP; 0 picks free ports for all three
    grpc_port: int | None = None     # default port + 1
    metrics_port: int | None = None  # default port + 2
    name: str | None = None
    max_batch_size: int = 32
    max_wait_ms: float = 5.0
    instances: int = 1
    threads: int | None = None       # onnxruntime threads per instance
    python: str | None = None        # the Python the stub runs (default: this one)
    ready_timeout_s: float = 120.0
    exit_timeout_s: int = 10


def serve_triton(model_dir: str | Path | list[tuple[str, str | Path]],
                 opts: TritonServeOptions = TritonServeOptions(), *, announce=print) -> int:
    """Serve until tritonserver exits (SIGINT/SIGTERM are passed on); returns the exit status.
    `model_dir`: one export, or (name, folder) pairs: one Triton model each, in one
    repository (Triton routes by the model's name in the path)."""
    if isinstance(model_dir, (str, Path)):
        folder = resolve_export(model_dir)
        models = [(opts.name or folder.resolve().name, folder)]
    else:
        models = [(name, resolve_export(d)) for name, d in model_dir]
    # a wrong folder fails here, in one line
    tasks = [read_manifest(d, verify=False).task for _, d in models]
    with tempfile.TemporaryDirectory(prefix="bertonnx-triton-") as scratch:
        scratch = Path(scratch)
        ports = Ports.choose(opts.host, opts.port, opts.grpc_port, opts.metrics_port)
        server = TritonServer(scratch / "models", scratch, ports, host=opts.host,
                              python=opts.python, exit_timeout_s=opts.exit_timeout_s)
        for name, folder in models:
            write_repository(folder, scratch / "models", TritonOptions(
                name=name, max_batch_size=opts.max_batch_size, instances=opts.instances,
                max_wait_ms=opts.max_wait_ms, threads=opts.threads, link=True))
        stopping = []

        def forward(signum, frame):
            stopping.append(signum)
            server.signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            server.start(opts.ready_timeout_s)
            served = ", ".join(f"{folder} ({task}) as {name}"
                               for (name, folder), task in zip(models, tasks))
            infer = ", ".join(f"/v2/models/{name}/infer" for name, _ in models)
            announce(f"bertonnx: Triton serving {served} on "
                     f"{server.url} — gRPC {server.client_host}:{ports.grpc}, metrics "
                     f"http://{server.client_host}:{ports.metrics}/metrics; POST {infer}")
            server.wait()
        except BaseException:
            if stopping:  # interrupted while starting: stopped, as asked
                server.stop()
                return 0
            raise
        finally:
            code = server.stop()
            for s, handler in previous.items():
                signal.signal(s, handler)
    return 0 if code == 0 or stopping else 1
