"""The one onnxruntime session factory: providers, threads, graph optimisation level, feeds.

Every pipeline (and the server) gets its `Session` from `create_session`, so provider choice,
thread count and optimisation level are decided in one place. The session feeds only the
inputs the graph declares — a fused graph may have dropped `token_type_ids` — as int64, and
returns outputs by the contract's names as float32 (fp16 graphs are widened for numpy
post-processing). Reference: onnxruntime's `InferenceSession` / `SessionOptions` API.
"""
from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np
import onnxruntime as ort

from . import engines, openvino_engine, openvino_runtime, pages
from .blas import engine_owns_cores
from .batches import MAX_BATCH_TOKENS
from .bounds import check_streams, check_threads
from .cpu import usable_cpus
from .errors import ArtifactError, ConfigError

T = TypeVar("T")

OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

# onnxruntime rewrites it loads a graph with on CPU-only sessions and we turn off.
# SkipLayerNormFusion folds Add(residual) -> LayerNormalization into SkipLayerNormalization,
# whose CPU kernel (onnxruntime 1.32) takes 3.8× as long as the Add + LayerNormalization it
# replaces: 8.2 ms vs 2.2 ms on a (32, 128, 384) tensor, one thread, AVX-512 Xeon; 12 of them
# were 21% of MiniLM's int8 forward. Export leaves those pairs unfused (export/fusion.py);
# CUDA sessions keep the rewrite (its GPU kernel is the fast one).
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


def disabled_optimizers(providers) -> list[str]:
    return list(CPU_DISABLED_OPTIMIZERS) if list(providers) == ["CPUExecutionProvider"] else []


@dataclass(frozen=True)
class SessionConfig:
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    engine: str = "cpu"                 # engines.ENGINES: cpu | openvino | cuda | tensorrt
    precision: str = "f32"              # the engine's arithmetic: f32 | bf16 | int8
    reason: str = "asked"               # why this engine (auto's rule, or the user asked)
    batch_tokens: int = MAX_BATCH_TOKENS  # padded tokens per call the engine runs best at
    pad_multiple: int = 1               # batch widths rounded up to it (engines.Engine)
    threads: int | None = None          # intra-op threads; None = onnxruntime's default
    streams: int = 1                    # calls run at once (engines.Engine.streams)
    optimization: str = "all"           # disable | basic | extended | all
    # The arena keeps its high-water mark for the session's life; export's parity runs turn it
    # off so a (B, T, 30522) fill-mask batch does not stay reserved through the whole export.
    memory_arena: bool = True
    # Prepacking lays weights out for MLAS's GEMMs at load: a second copy of each packed
    # weight, and much faster runs (measured: bench/session_memory.py); off only to measure.
    prepacking: bool = True


    @property
    def key(self) -> str:
        """`engine:precision`, which `--providers` takes back (a Ray actor's, a report's)."""
        return f"{self.engine}:{self.precision}"


class Session:
    """An `InferenceSession` that knows which inputs its graph takes."""

    def __init__(self, inner: ort.InferenceSession, config: SessionConfig):
        self.inner = inner
        self.config = config
        self._pool: ThreadPoolExecutor | None = None   # config.streams > 1: made at first use
        self._pool_lock = threading.Lock()
        self.input_names = tuple(i.name for i in inner.get_inputs())
        self.output_names = tuple(o.name for o in inner.get_outputs())
        # name -> shape as the graph declares it (ints where fixed, names or None where dynamic)
        self.output_shapes = {o.name: list(o.shape) for o in inner.get_outputs()}

    @property
    def providers(self) -> list[str]:
        return self.inner.get_providers()

    def run(self, feeds: dict[str, np.ndarray], outputs: tuple[str, ...] | None = None
            ) -> dict[str, np.ndarray]:
        """Run on int64 feeds, dropping those the graph does not declare; float32 outputs."""
        feed = {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in feeds.items()
                if k in self.input_names}
        missing = [n for n in self.input_names if n not in feed]
        if missing:
            raise ArtifactError(f"the graph wants inputs {missing} the runtime does not make",
                                "export the model again with `bertonnx export`")
        names = list(outputs or self.output_names)
        values = self.inner.run(names, feed)
        return {n: (v if v.dtype == np.float32 else v.astype(np.float32))
                for n, v in zip(names, values)}

    def run_each(self, items: Iterable[T], feeds: Callable[[T], dict],
                 outputs: tuple[str, ...] | None = None) -> Iterator[tuple[T, dict]]:
        """(item, outputs) for each item, in order, its feeds made by `feeds(item)`; up to
        `config.streams` calls run at once (the engine's streams; onnxruntime releases the GIL
        while it runs), which also bounds this session's calls across threads."""
        if self.config.streams == 1:
            for item in items:
                yield item, self.run(feeds(item), outputs)
            return
        pool = self._workers()
        pending: deque = deque()
        items = iter(items)
        while True:
            # keep `streams` calls queued; the oldest is answered first, so results stay in order
            for item in itertools.islice(items, self.config.streams - len(pending)):
                pending.append((item, pool.submit(self.run, feeds(item), outputs)))
            if not pending:
                return
            item, done = pending.popleft()
            yield item, done.result()

    def _workers(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.config.streams,
                                                thread_name_prefix="bertonnx-stream")
            return self._pool


def create_session(model: str | Path | bytes, *, providers=None, threads: int | None = None,
                   optimization: str = "all", memory_arena: bool = True,
                   prepacking: bool = True, profile_prefix: str | None = None,
                   streams: int | str = 1) -> Session:
    """The only place an `InferenceSession` is made: from a file, or from a serialized graph
    (export checks graphs it has not written yet). `streams`: calls at once, the threads
    split between them ("auto": the engine's for throughput work, engines.Engine.streams)."""
    if not isinstance(model, bytes) and not Path(model).is_file():
        raise ArtifactError(f"{model} does not exist", "export the model with `bertonnx export`")
    if optimization not in OPTIMIZATION_LEVELS:
        raise ConfigError(f"unknown graph optimisation level {optimization!r}",
                          f"use one of {', '.join(OPTIMIZATION_LEVELS)}")
    check_threads(threads)
    check_streams(streams)
    engine_owns_cores()
    choice = providers if isinstance(providers, engines.Choice) else engines.concrete(providers)
    config = SessionConfig(choice.providers, choice.engine, choice.precision, choice.reason,
                           choice.batch_tokens, choice.pad_multiple, threads,
                           choice.streams(streams, threads), optimization, memory_arena,
                           prepacking)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    opts.enable_cpu_mem_arena = memory_arena
    if not prepacking:
        opts.add_session_config_entry("session.disable_prepacking", "1")
    if profile_prefix:  # onnxruntime's per-node timings, for bench/cpu_time.py's profile
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    if threads or config.streams > 1:
        # several calls at once on onnxruntime's own kernels: each its share of the threads
        opts.intra_op_num_threads = max(1, (threads or usable_cpus())
                                                // config.streams)
        # one inter-op thread: a BERT graph is a chain, parallel branches buy nothing
        opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # onnxruntime's warnings (e.g. unused initializers) are noise here
    session_providers = list(config.providers)
    name = "the graph" if isinstance(model, bytes) else str(model)
    # the static int8 graph is an OpenVINO IR, which only OpenVINO's own runtime reads
    if config.engine == "openvino" and (config.precision == "int8"
                                        or openvino_engine.openvino_runtime()):
        return _runtime_session(model, name, config)
    if config.engine == "openvino":
        # a plugin EP is added by device, not by name; a graph it cannot take whole is an
        # error, not a silent split with the CPU provider (which the precision would not cover)
        opts.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        opts.add_provider_for_devices(list(openvino_engine.openvino_devices()),
                                      openvino_engine.openvino_options(config.precision, threads,
                                                                config.streams))
        session_providers = None
    try:
        inner = ort.InferenceSession(model if isinstance(model, bytes) else str(model),
                                     sess_options=opts, providers=session_providers,
                                     disabled_optimizers=disabled_optimizers(config.providers))
    except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph/InvalidProtobuf types
        if "INVALID_PROTOBUF" in str(e):
            raise ArtifactError(f"{name} is not an ONNX model (truncated, or a foreign file)",
                                "copy it again from the source, or export again") from e
        if "fallback to CPU EP has been explicitly disabled" in str(e):
            raise ConfigError(f"OpenVINO cannot run every op of {name} (a dynamic int8 "
                              "graph's ops are onnxruntime's own)",
                              "use an fp32 export with openvino, or --providers cpu") from e
        raise ArtifactError(f"onnxruntime cannot load {name} ({str(e).splitlines()[0][:200]})",
                            "export the model again") from e
    if config.engine == "openvino" and not isinstance(model, bytes):
        pages.release(model)   # OpenVINO compiled its own weights: the file's pages are idle
    return Session(inner, config)


def _runtime_session(model: str | Path | bytes, name: str, config: SessionConfig) -> Session:
    """The openvino engine on OpenVINO's own runtime (a CPU onnxruntime's plugin skips)."""
    try:
        inner = openvino_runtime.compile_model(
            model, openvino_engine.openvino_config(config.precision, config.threads,
                                                   config.streams))
    except Exception as e:  # OpenVINO raises RuntimeError for a graph its frontend cannot take
        # its message is a C++ trace; the line that says why names the ops it lacks
        lines = [x.strip("- ") for x in str(e).splitlines() if x.strip()]
        why = next((x for x in lines if "operations" in x), lines[-1] if lines else "")
        raise ConfigError(f"OpenVINO cannot run every op of {name} ({why[:200]})",
                          "use an fp32 export with openvino, or --providers cpu") from e
    if not isinstance(model, bytes):
        pages.release(model)   # OpenVINO compiled its own weights: the file's pages are idle
    return Session(inner, config)
