"""OpenVINO's own runtime behind onnxruntime's session interface: the `openvino` engine on CPUs
whose vendor is not Intel, where onnxruntime's OpenVINO plugin offers no device
(microsoft/onnxruntime#31981) though OpenVINO's CPU plugin runs there.

It matters on AMD Zen 4 and later (AVX512-BF16): all-MiniLM-L6-v2's fused fp32 graph, batch
32 x 128, 2 threads, on a 2-core AMD EPYC (Zen 4) took 529-558 ms on onnxruntime's CPU
provider, 544-559 ms on OpenVINO f32, 262-301 ms on OpenVINO bf16 at token cosine 0.99998 mean
/ 0.99988 worst to fp32 — and 263-317 ms for the dynamic int8 graph (three runs; docs/engines.md,
"Measured (AMD EPYC Zen 4, …)").

`RuntimeSession` answers what session.py and export's parity ask of an `InferenceSession`:
`get_inputs()`, `get_outputs()` (name, type, shape), `run(names, feeds)`, `get_providers()`.
The graph is OpenVINO's ONNX frontend's reading of the same file (the fused graph's
com.microsoft ops included), compiled once; each concurrent call takes an infer request of its
own (one request runs one call at a time), so a server's threads and a bulk job's streams are
safe.
"""
from __future__ import annotations

import functools
import io
import queue
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROVIDER = "OpenVINO"   # what get_providers() names: OpenVINO's runtime, not an onnxruntime EP

# OpenVINO element types as onnxruntime's NodeArg.type spells them (foreign.check_inputs)
TYPES = {"i64": "tensor(int64)", "i32": "tensor(int32)", "f32": "tensor(float)",
         "f16": "tensor(float16)", "bf16": "tensor(bfloat16)"}


@dataclass(frozen=True)
class Arg:
    """An input or output as onnxruntime's NodeArg shows it."""
    name: str
    type: str
    shape: list


def _args(ports) -> list[Arg]:
    return [Arg(p.get_any_name(), TYPES.get(p.get_element_type().get_type_name(),
                                            f"tensor({p.get_element_type().get_type_name()})"),
                [d.get_length() if d.is_static else None for d in p.get_partial_shape()])
            for p in ports]


class RuntimeSession:
    """A compiled OpenVINO model run like an onnxruntime session."""

    def __init__(self, compiled):
        self.compiled = compiled
        self._inputs = _args(compiled.inputs)
        self._outputs = _args(compiled.outputs)
        self._ports = {a.name: p for a, p in zip(self._outputs, compiled.outputs)}
        self._idle: queue.SimpleQueue = queue.SimpleQueue()

    def get_inputs(self) -> list[Arg]:
        return list(self._inputs)

    def get_outputs(self) -> list[Arg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return [PROVIDER]

    def run(self, names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            request = self._idle.get_nowait()
        except queue.Empty:   # every request is busy in another thread: one more
            request = self.compiled.create_infer_request()
        try:
            # the feeds are read during the call only; the outputs are copies (share_outputs
            # off), so the request can take the next call while the caller reads them
            answer = request.infer(feeds, share_inputs=True)
            return [answer[self._ports[n]] for n in (names or self._ports)]
        finally:
            self._idle.put(request)


_core_lock = threading.Lock()


@functools.cache
def _core():
    # the openvino extra's (180 MB, optional): imported only where this engine runs
    import openvino

    # The first `Type.to_dtype()` in a process (every infer call makes one) initializes a C++
    # static whose initializer waits for the GIL, while a second thread making its first call
    # waits on that static holding the GIL: two streams' first calls at once hung for good in
    # 5 of 40 fresh processes (openvino 2026.4.1, 2 threads past a barrier). Made here, once,
    # before any session exists to be called from threads.
    openvino.Type.f32.to_dtype()
    return openvino.Core()


def core():
    """The process's one OpenVINO Core (it finds and loads its device plugins once)."""
    with _core_lock:   # two loads at once in threads make one Core, and one to_dtype first
        return _core()


def compile_model(model: str | Path | bytes, config: dict[str, str]) -> RuntimeSession:
    """`model` (a path, or a serialized graph) compiled for the CPU with OpenVINO `config`
    (openvino_engine.openvino_config)."""
    source = io.BytesIO(model) if isinstance(model, bytes) else str(model)
    return RuntimeSession(core().compile_model(core().read_model(source), "CPU", config))
