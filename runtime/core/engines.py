"""Engines: which runtime runs an export's graph, at which precision, and the one `auto` picks
for the CPU at hand. The session factory (session.py) reads this table; nothing else knows an
engine by name.

    cpu       onnxruntime's CPU kernels (MLAS): every graph (fp32, dynamic int8, fp16 widened)
    openvino  Intel's OpenVINO (`pip install 'bertonnx[openvino]'`): fp32 graphs, at f32 or bf16
              (AMX-BF16, AVX512-BF16); the fused graph's com.microsoft ops (Attention,
              EmbedLayerNormalization, BiasGelu) all run there, so one graph serves both
              engines (docs/engines.md). On Intel CPUs through onnxruntime's plugin
              (onnxruntime-ep-openvino, measured there); elsewhere, where that plugin offers
              no device, through OpenVINO's own runtime (openvino_runtime.py). `int8`: an int8
              export's static int8 graph (export/openvino_int8.py, an OpenVINO IR the
              manifest names), on OpenVINO's own runtime everywhere
    cuda, tensorrt   onnxruntime-gpu's providers

What users type (`providers=`, `--providers`, else the environment's BERTONNX_PROVIDERS, else
`auto`): `auto`, an engine, `ENGINE:PRECISION` (`openvino:bf16`), or
onnxruntime provider names as a list (`cuda,cpu`). `auto` is never less accurate than the export
proved: it takes a faster engine only where the manifest records that engine and precision
passing its gate at export (`Manifest.engines`; gates in contract.py).

Why OpenVINO: onnxruntime's CPU provider has no bf16 arithmetic on x86 (microsoft/onnxruntime
#20630, #19937); docs/engines.md has the figures.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

import onnxruntime as ort

from . import defaults, openvino_engine
from .batches import MAX_BATCH_TOKENS
from .contract import BF16_MIN_MEAN_COSINE, INT8_MIN_COSINE, INT8_MIN_MEAN_COSINE
from .cpu import cpu_flags, this_kind, usable_cpus
from .errors import ConfigError
from .once import first_time
from .openvino_engine import find_runtime, has_bf16, openvino_devices, runtime_unavailable

# its own logger: the CLI shows its INFO line (the advice below), not every library INFO
log = logging.getLogger("bertonnx.engines")


@dataclass(frozen=True)
class Engine:
    name: str                     # what users type
    provider: str                 # onnxruntime's execution provider
    precisions: tuple[str, ...]   # float arithmetic it offers; the first is its exact one
    extra: str | None = None      # the bertonnx extra that installs it
    plugin: str | None = None     # Python module of an EP plugin library (registered once)
    install: str = ""             # how to get it, for the one-line error
    # padded tokens per session call its kernels run best at (pipelines' micro-batches,
    # runtime/core/batches.py): the CPU provider's 512 keeps a call's activations in the cache
    # (Zen 4); AMX tiles want larger GEMMs — OpenVINO bf16, MiniLM, 512 prose sentences, 2
    # threads, one process: 512 969, 2048 1045, 4096 1036 texts/s (Xeon with AMX)
    batch_tokens: int = MAX_BATCH_TOKENS
    # ... where a precision differs: the static int8 graph's VNNI GEMMs gain nothing past 1024
    # (per-token time level from 352 to 1,936 tokens a call), and smaller calls pad less and
    # share the last ones between streams better — 1024 against 2048 on Zen 4, 2 threads, 5
    # rounds: MiniLM 512 sentences 1.02x (one stream) / 1.07x (two), passages 1.01x / 1.05x,
    # ColBERT documents 1.05x (docs/engines.md, "Static int8 on OpenVINO"). Not measured on AMX.
    precision_batch_tokens: tuple[tuple[str, int], ...] = ()
    # a batch's width rounded up to this (batches.padded_width). OpenVINO's CPU plugin compiles
    # and caches kernels per input shape: on a server's mix of lengths every new width cost a
    # compile and ~1.7 MB kept for the process's life (MiniLM, 2,000 widths: 2.6 GB). Widths
    # in steps of 16 (AMX's tile rows) on 1,200 random (1-16, 8-100) shapes: 33.5k against
    # 25.7k real tokens/s and 370 against 1,066 MB (docs/engines.md, "Batch widths"). The CPU
    # provider compiles nothing per shape, so its padding would only be work.
    pad_multiple: int = 1
    # session calls at once for throughput work (streams="auto": bulk jobs), the threads split
    # between them (Session.run_each). Small batches use few threads well: on OpenVINO two
    # streams of one thread ran MiniLM bf16 1.08-1.12x one call on two threads (Xeon with AMX),
    # but a lone call gets one thread, so latency work (load's default, serve) keeps one
    # stream per call. The CPU provider measured level (fp32) to 1.06x (int8): one.
    # docs/engines.md, "Streams".
    streams: int = 1


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("cpu", "CPUExecutionProvider", ("f32",)),
    Engine("openvino", openvino_engine.PROVIDER, ("f32", "bf16", "int8"), extra="openvino",
           plugin=openvino_engine.PLUGIN, install=openvino_engine.INSTALL,
           batch_tokens=2048, precision_batch_tokens=(("int8", 1024),), pad_multiple=16,
           streams=2),
    Engine("cuda", "CUDAExecutionProvider", ("f32",), install="pip install onnxruntime-gpu"),
    Engine("tensorrt", "TensorrtExecutionProvider", ("f32",),
           install="pip install onnxruntime-gpu tensorrt"),
)}
ALIASES = {"trt": "tensorrt"}
ENVIRONMENT = "BERTONNX_PROVIDERS"
PROVIDER_ENGINES = {e.provider: e.name for e in ENGINES.values()}
# what an engine's nodes fall back to before the CPU provider
FALLBACK = {"tensorrt": ("CUDAExecutionProvider",)}

# What `auto` tries on each kind of CPU (cpu.py target_kind), best first; the first whose
# conditions hold (extra installed, fp32 graph, the manifest's gate passed) runs. Elsewhere the
# CPU provider: on AVX2 it is bertonnx's measured fastest (docs/benchmarks-history.md, Zen 3).
AUTO: dict[str | None, tuple[tuple[str, str], ...]] = {
    "amx": (("openvino", "bf16"), ("openvino", "f32"), ("cpu", "f32")),
    # bf16 where the CPU computes it (Zen 4's AVX512-BF16: 1.8-2.1x the CPU provider model-only,
    # openvino_runtime.py); OpenVINO f32 measured level with the CPU provider there
    "avx512-vnni": (("openvino", "bf16"), ("cpu", "f32")),
}
DEFAULT_AUTO = (("cpu", "f32"),)
# What `auto` tries before AUTO's rows for throughput work (load's `bulk`: `bertonnx run`, Ray
# Data). An int8 export's static int8 graph on Zen 4: 1.10-1.33x its onnxruntime graph in bulk
# and more exact (MiniLM passages: worst cosine 0.995 against 0.989), ColBERT documents 2.1-2.4x
# PyLate's fastest against 1.5-1.9x — but 0.95-1.02x served short sentences, at 2.6-2.7x the
# RSS, so latency work (load's default, serve) keeps AUTO's rows. Not measured on AMX with this
# recipe: there AUTO's rows (docs/engines.md, "Static int8 on OpenVINO").
BULK_AUTO: dict[str | None, tuple[tuple[str, str], ...]] = {
    "avx512-vnni": (("openvino", "int8"),),
}


@dataclass(frozen=True)
class Choice:
    """The engine and precision a session runs with, and why (shown by `bench`, `/info`)."""
    engine: str
    precision: str
    reason: str = "asked"
    providers: tuple[str, ...] = ()   # onnxruntime provider list (engines without a plugin)

    @property
    def batch_tokens(self) -> int:
        row = ENGINES.get(self.engine)
        if row is None:
            return MAX_BATCH_TOKENS
        return dict(row.precision_batch_tokens).get(self.precision, row.batch_tokens)

    @property
    def pad_multiple(self) -> int:
        row = ENGINES.get(self.engine)
        return row.pad_multiple if row is not None else 1

    def streams(self, asked: int | str, threads: int | None) -> int:
        """Session calls at once: as `asked` ("auto": the engine's for throughput work), one
        thread each at least."""
        row = ENGINES.get(self.engine)
        want = (row.streams if row is not None else 1) if asked == "auto" else asked
        return max(1, min(want, threads or usable_cpus()))

    @property
    def key(self) -> str:
        return f"{self.engine}:{self.precision}"


def engine(name: str) -> Engine:
    """The row of an engine name, or of an onnxruntime provider this build has (ROCm, DirectML,
    CoreML ... run as they are, f32, falling back to the CPU provider)."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key in ENGINES:
        return ENGINES[key]
    if name.strip() in PROVIDER_ENGINES:
        return ENGINES[PROVIDER_ENGINES[name.strip()]]
    available = ort.get_available_providers()
    if name.strip() in available:
        return Engine(name.strip(), name.strip(), ("f32",))
    raise ConfigError(f"execution provider {name.strip()!r} is not available in this "
                      f"onnxruntime (available: {', '.join(available)})",
                      f"use auto, {', '.join(ENGINES)}, ENGINE:PRECISION (e.g. openvino:bf16) "
                      "or one of those")


def parse(spec) -> Choice | None:
    """A user's `providers` as a concrete Choice, or None for `auto` (decided by `choose`)."""
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "auto")):
        return None
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if len(parts) == 1 and ":" in parts[0]:
        name, _, prec = parts[0].partition(":")
        e = engine(name)
        if prec not in e.precisions:
            raise ConfigError(f"engine {e.name} has no precision {prec!r}",
                              f"use one of {', '.join(e.precisions)}")
        return _checked(Choice(e.name, prec, providers=_with_fallback(e)), e)
    rows = [engine(p) for p in parts]
    names = [e.name for e in rows]
    if "openvino" in names:
        if len(set(names) - {"cpu"}) > 1:
            raise ConfigError("openvino runs a graph alone", "ask for openvino, or for others")
        return _checked(Choice("openvino", "", providers=(ENGINES["openvino"].provider,)),
                        ENGINES["openvino"])
    providers = tuple(dict.fromkeys(_with_fallback(rows[0]) if len(rows) == 1 else
                                    [e.provider for e in rows] + ["CPUExecutionProvider"]))
    return _checked(Choice(names[0], "f32", providers=providers), rows[0])


def concrete(spec) -> Choice:
    """A Choice with no manifest to consult (a graph export checks, a bare session): `spec` as
    asked, `auto` or nothing as the CPU provider, bare `openvino` as f32 (bf16 only where an
    export's parity record proved it, which `choose` reads)."""
    asked = parse(spec) or parse("cpu")
    if asked.engine == "openvino" and not asked.precision:
        return replace(asked, precision="f32")
    return asked


def _with_fallback(e: Engine) -> tuple[str, ...]:
    """A provider list for one engine: onnxruntime's GPU providers hand the ops they lack on
    (TensorRT to CUDA, as onnxruntime's TensorRT docs order them, then the CPU provider); a
    plugin engine runs the graph alone (session.py refuses a split)."""
    if e.plugin:
        return (e.provider,)
    chain = (e.provider, *FALLBACK.get(e.name, ()), "CPUExecutionProvider")
    return tuple(dict.fromkeys(chain))


def _checked(choice: Choice, e: Engine) -> Choice:
    """The choice if this process can run it; one line naming the install otherwise."""
    if e.plugin and choice.precision == "int8":
        find_runtime()      # an OpenVINO IR: OpenVINO's own runtime reads it, on every CPU
        return choice
    if e.plugin:
        openvino_devices()  # raises the one-line error when the extra is missing
        if choice.precision == "bf16" and not has_bf16():
            raise ConfigError("this CPU has no bf16 arithmetic (AMX-BF16 or AVX512-BF16): "
                              "OpenVINO would run f32", "use --providers openvino:f32")
        return choice
    available = ort.get_available_providers()
    for p in choice.providers:
        if p not in available:
            owner = ENGINES.get(PROVIDER_ENGINES.get(p, ""), e)
            raise ConfigError(f"execution provider {owner.name!r} is not available in this "
                              f"onnxruntime (available: {', '.join(available)})",
                              f"{owner.install}, or use --providers cpu")
    return choice


def installed(name: str) -> bool:
    return unavailable(name) is None


def unavailable(name: str) -> str | None:
    """Why engine `name` cannot run here (the one-line error `--providers` would give), or
    None when it can."""
    try:
        if ENGINES[name].plugin:
            openvino_devices()
        elif ENGINES[name].provider not in ort.get_available_providers():
            return f"onnxruntime here has no {ENGINES[name].provider}"
    except ConfigError as err:
        return str(err)
    return None


def runnable(quantization: str, engines: dict) -> list[str]:
    """`engine:precision` keys this process can run an export with (its `quantization`, "none":
    fp32; its manifest's `engines`), the CPU provider first: what `bertonnx bench DIR` times
    side by side."""
    keys = ["cpu:f32"]
    if quantization == "none" and installed("openvino"):
        keys += ["openvino:f32"] + (["openvino:bf16"] if has_bf16() else [])
    if "file" in engines.get("openvino:int8", {}) and runtime_unavailable() is None:
        keys.append("openvino:int8")
    return keys


def graph_file(choice: Choice, engines: dict) -> str | None:
    """The file of the export an engine reads in place of model.onnx (None: model.onnx): the
    static int8 graph for openvino:int8, as the manifest's `engines` names it."""
    if choice.key != "openvino:int8":
        return None
    if "file" not in engines.get(choice.key, {}):
        raise ConfigError("this export has no OpenVINO int8 graph (openvino:int8 runs the static "
                          "int8 graph an int8 export writes with NNCF installed)",
                          "export it with --quantize int8 and `pip install 'bertonnx[nncf]'`, "
                          "or use --providers cpu")
    return engines[choice.key]["file"]


def choose(spec, *, quantization: str, engines: dict, where: str = "the export",
           kind: str | None = None, bulk: bool = False) -> Choice:
    """The Choice for a graph: `spec` as asked, or for `auto` the first row of AUTO for this CPU
    (for `bulk` throughput work, BULK_AUTO's first) whose engine is installed and whose
    precision the manifest's `engines` records as passing its gate on this graph (an fp32
    graph: `quantization` "none")."""
    kind = this_kind() if kind is None else kind
    if spec is None:  # a deployment's (or a test suite's) choice for every load in the process
        spec = os.environ.get(ENVIRONMENT) or "auto"
    asked = parse(spec)
    if asked is not None:
        if asked.engine == "openvino" and not asked.precision:
            # plain `openvino`: an int8 export's OpenVINO graph; bf16 where it computes bf16
            # and the export proved it, else f32
            bf16 = has_bf16() and _passed(engines, "openvino:bf16")
            prec = "int8" if quantization == "int8" else "bf16" if bf16 else "f32"
            return _checked(replace(asked, precision=prec), ENGINES["openvino"])
        return asked
    for name, prec in (BULK_AUTO.get(kind, ()) if bulk else ()) + AUTO.get(kind, DEFAULT_AUTO):
        if name == "cpu":
            _advise(kind, quantization, engines, where)
            return Choice("cpu", prec, f"auto: {kind or 'this'} CPU",
                          (ENGINES["cpu"].provider,))
        # int8 rows run an int8 export's OpenVINO graph, the others an fp32 export's graph
        if (prec == "int8") != (quantization == "int8") or not _passed(engines, f"{name}:{prec}"):
            continue
        if prec == "int8":   # the IR on OpenVINO's own runtime, at the hint it was measured at
            if runtime_unavailable() is not None or openvino_engine.openvino_hint(prec) != "bf16":
                continue
        elif not installed(name) or (prec == "bf16" and not has_bf16()):
            continue
        work = "bulk work on " if bulk else ""
        return Choice(name, prec, f"auto: {work}{kind} CPU, {name}:{prec} passed its gate at "
                      "export", _with_fallback(ENGINES[name]))
    return Choice("cpu", "f32", "auto", (ENGINES["cpu"].provider,))


def _shipped(where: str) -> bool:
    """An export inside this package (the `default` models): no checkpoint to re-export."""
    try:
        return Path(where).resolve().is_relative_to(defaults.MODELS)
    except (OSError, ValueError):
        return False


def _passed(engines: dict, key: str) -> bool:
    return bool(engines.get(key, {}).get("passed"))


def warn_if_failed(choice: Choice, engines: dict, where: str) -> bool:
    """One warning per export and process where the engine asked for by name did not pass its
    gate at export (`auto` never takes one): it runs as asked, but the user is told its
    answers are less exact than the gate allows, or were never judged. True when it warned."""
    record = engines.get(choice.key)
    if record is None or record.get("passed") or not first_time("gate", where, choice.key):
        return False
    # a note says why there is no verdict ("not judged (--no-parity)", an error); figures failed
    what = ("has no verdict from export: %s" if "note" in record
            else "failed its gate at export (%s)")
    log.warning("%s: %s " + what + "; asked for by name, it runs — `--providers auto` takes "
                "only what passed", where, choice.key, _figures(record))
    return True


def summary_lines(figures: dict) -> list[str]:
    """One line per engine's parity record (`Manifest.engines`): what export prints beside
    the CPU provider's parity line."""
    return [f"parity {key}: {_figures(f)}" + ("" if "note" in f else
                                              f": {'PASS' if f['passed'] else 'FAIL'}")
            for key, f in figures.items()]


def _figures(f: dict) -> str:
    """A parity record's figures, without its verdict: summary_lines', and warn_if_failed's."""
    if "note" in f:
        return f["note"]
    if f.get("mode") == "int8":   # OpenVINO's static int8 graph (openvino_int8.py)
        m = f["metrics"]
        cos = (f", cosine mean {m['cosine_mean']:.4f}, worst {m['cosine_min']:.4f} (gate: "
               f"mean >= {INT8_MIN_MEAN_COSINE}, worst >= {INT8_MIN_COSINE})"
               if "cosine_mean" in m else "")
        return (f"agreement {f['agreement']:.3f} on {f['examples']} real sentences (minimum "
                f"{f['min_agreement']}){cos}")
    if f.get("mode") == "cosine":
        mean, low = min(f["mean_cosine"].values()), min(f["min_cosine"].values())
        return (f"mean cosine {mean:.6f}, worst {low:.6f}, max |Δ| "
                f"{max(f['max_abs'].values()):.2e} (gate: mean >= {f['gate_mean_cosine']})")
    return f"max |Δ| {max(f['max_abs'].values()):.2e} (tolerance {f['atol']})"


# where auto takes OpenVINO bf16 for an fp32 export: the CPU feature and what it bought
# model-only (docs/engines.md: Xeon with AMX; AMD EPYC Zen 4)
GAINS = {"amx": ("AMX", "4x"), "avx512-vnni": ("AVX512-BF16", "2x")}


def _advise(kind: str | None, quantization: str, engines: dict, where: str) -> None:
    """One INFO line per process where a faster exact engine is one step away."""
    if kind not in GAINS or quantization != "none" or (kind == "avx512-vnni" and "avx512_bf16"
                                                       not in cpu_flags()):  # Ice Lake: no bf16
        return
    if not first_time("engine-advice", kind):
        return
    if not installed("openvino"):
        log.info("this CPU has %s: OpenVINO bf16 runs fp32 exports about %s faster "
                 "model-only at mean cosine >= %s to fp32 (docs/engines.md) — %s",
                 *GAINS[kind], BF16_MIN_MEAN_COSINE, ENGINES["openvino"].install)
    elif "openvino:bf16" not in engines and not _shipped(where):
        log.info("%s has no OpenVINO parity record, so auto keeps onnxruntime's CPU kernels — "
                 "export it again with bertonnx[openvino] installed, or pass "
                 "--providers openvino:bf16", where)
