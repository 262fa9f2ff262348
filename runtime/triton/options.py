"""The options of a Triton model repository entry, shared by both kinds of model."""
from __future__ import annotations

from dataclasses import dataclass

KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}   # instance_group kind
BACKENDS = ("python", "onnxruntime")              # the pipeline model, or the graph alone


@dataclass(frozen=True)
class TritonOptions:
    name: str | None = None          # model name in the repository; default: the folder's name
    max_batch_size: int = 32
    instances: int = 1               # instance_group count: copies of the model per device
    kind: str = "cpu"                # cpu | gpu
    max_wait_ms: float = 5.0         # dynamic_batching max_queue_delay_microseconds / 1000
    force: bool = False              # replace an existing REPO/NAME
    backend: str = "python"          # BACKENDS: the pipeline model, or the graph alone
    threads: int | None = None       # python: onnxruntime threads per instance (its default)
    link: bool = False               # python: link the export instead of copying it

    def scheduling(self) -> str:
        """config.pbtxt's dynamic batching and instance group, the same for both kinds."""
        return ("dynamic_batching {\n"
                f"  max_queue_delay_microseconds: {int(round(self.max_wait_ms * 1000))}\n"
                "}\n"
                "instance_group [\n"
                "  {\n"
                f"    count: {self.instances}\n"
                f"    kind: {KINDS[self.kind]}\n"
                "  }\n"
                "]\n")
