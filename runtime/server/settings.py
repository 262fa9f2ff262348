"""`bertonnx serve`'s options, one typed record (the CLI and `create_app` share it)."""
from __future__ import annotations

from dataclasses import dataclass

from .batching import BatchConfig


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"                  # loopback unless the user opens it up
    port: int = 8080                         # 0 = any free port (printed at start)
    batch: BatchConfig = BatchConfig()
    max_body_bytes: int = 1 << 20            # 1 MiB of JSON is ~ a few hundred contexts
    threads: int | None = None               # onnxruntime intra-op threads per call
    providers: str | None = None             # onnxruntime providers, e.g. "cuda,cpu"
    graceful_timeout_s: int = 30             # SIGTERM: how long in-flight requests may take
