"""Finding OpenVINO for the `openvino` engine (engines.py's row) and its settings.

Two ways in, one per CPU vendor: on Intel CPUs onnxruntime's plugin (onnxruntime-ep-openvino,
registered once per process; measured there), elsewhere OpenVINO's own runtime
(openvino_runtime.py), since the plugin offers no device on other vendors' CPUs. The static
int8 graph (export/openvino_int8.py) is an OpenVINO IR, which only OpenVINO's own runtime reads:
it runs there on every CPU.
"""
from __future__ import annotations

import functools
import importlib
import json

import onnxruntime as ort

from .cpu import cpuinfo_field
from .errors import ConfigError
from .openvino_runtime import core as openvino_core

PROVIDER = "OpenVINOExecutionProvider"     # onnxruntime's name for the plugin's provider
PLUGIN = "onnxruntime_ep_openvino"         # the plugin library's Python module
INSTALL = "pip install 'bertonnx[openvino]'"


def openvino_devices() -> tuple:
    """onnxruntime's OpenVINO CPU device, the plugin registered on first use; () where
    OpenVINO's own runtime runs the engine (openvino_runtime())."""
    devices, problem = _openvino()
    if problem is not None:
        raise ConfigError(*problem)
    return devices


def openvino_runtime() -> bool:
    """Whether the openvino engine runs on OpenVINO's own runtime here (a CPU onnxruntime's
    plugin takes no device of) rather than through onnxruntime's plugin."""
    return openvino_devices() == ()


# Once per process, the failure too: onnxruntime refuses a second registration of the same
# plugin, and where it offers no device (a CPU it skips) a second ask must say the same.
@functools.cache
def _openvino() -> tuple[tuple, tuple[str, str] | None]:
    try:
        if not _intel():
            return find_runtime(), None
        return _find_openvino(), None
    except ConfigError as err:
        return (), (err.problem, err.fix)


def _intel() -> bool:
    # onnxruntime's OpenVINO plugin (its ov_factory.cc) skips every CPU whose vendor is not
    # Intel (microsoft/onnxruntime#31981); there OpenVINO's own runtime runs the engine, and
    # the plugin is never loaded beside it (each brings its own libopenvino)
    return cpuinfo_field("vendor_id") in (None, "GenuineIntel")


def find_runtime() -> tuple:  # () once OpenVINO's own runtime imports and has its CPU
    try:
        core = openvino_core()
    except ImportError:
        raise ConfigError("the openvino engine needs the openvino extra",
                          INSTALL) from None
    if "CPU" not in core.available_devices:
        raise ConfigError("OpenVINO found no CPU device it supports here", "use --providers cpu")
    return ()


def _find_openvino() -> tuple:
    try:
        module = importlib.import_module(PLUGIN)
    except ImportError:
        raise ConfigError("the openvino engine needs the openvino extra", INSTALL) from None
    if not hasattr(ort, "register_execution_provider_library"):
        raise ConfigError(f"onnxruntime {ort.__version__} cannot load execution provider "
                          "plugins (1.23 or newer can)", "pip install -U onnxruntime")
    if not any(d.ep_name == PROVIDER for d in ort.get_ep_devices()):
        try:
            ort.register_execution_provider_library(PROVIDER, module.get_library_path())
        except Exception as err:  # a broken or foreign-ABI plugin
            raise ConfigError(f"onnxruntime could not load the OpenVINO plugin "
                              f"({str(err).splitlines()[0][:160]})",
                              "pip install -U onnxruntime onnxruntime-ep-openvino") from err
    devices = tuple(d for d in ort.get_ep_devices()
                    if d.ep_name == PROVIDER and d.ep_metadata.get("ov_device") == "CPU"
                    and "ov_meta_device" not in d.ep_metadata)
    if not devices:
        raise ConfigError("OpenVINO found no CPU device it supports here", "use --providers cpu")
    return devices


def has_bf16() -> bool:
    """Whether OpenVINO computes in bf16 here (it runs f32 when asked for bf16 otherwise)."""
    return "BF16" in _capabilities()


@functools.cache
def _capabilities() -> tuple[str, ...]:
    devices = _openvino()[0]   # the plugin's CPU on Intel; () where OpenVINO's runtime runs
    if devices:
        return tuple(devices[0].ep_metadata.get("OPTIMIZATION_CAPABILITIES", "").split())
    find_runtime()            # the one-line error where OpenVINO is not installed
    return tuple(openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def runtime_unavailable() -> str | None:
    """Why OpenVINO's own runtime cannot run here (it reads the static int8 graph, an IR, on
    every CPU), or None."""
    try:
        find_runtime()
    except ConfigError as err:
        return str(err)
    return None


def openvino_hint(precision: str) -> str:
    """OpenVINO's INFERENCE_PRECISION_HINT for a precision: the int8 graph's unquantized ops
    run bf16 where the CPU computes it (how its parity and speed were measured), else f32."""
    if precision == "int8":
        return "bf16" if "BF16" in _runtime_capabilities() else "f32"
    return precision


@functools.cache
def _runtime_capabilities() -> tuple[str, ...]:
    # asked of OpenVINO's own runtime, which runs the int8 graph: on Intel, asking the plugin
    # would load its libopenvino beside the package's
    find_runtime()
    return tuple(openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def openvino_config(precision: str, threads: int | None, streams: int = 1) -> dict[str, str]:
    """OpenVINO's CPU settings for a session (either way the engine runs)."""
    cpu = {"INFERENCE_PRECISION_HINT": openvino_hint(precision)}
    if threads:
        cpu["INFERENCE_NUM_THREADS"] = str(threads)
    if streams > 1:   # the threads split between streams, each running one call
        cpu.update(PERFORMANCE_HINT="THROUGHPUT", NUM_STREAMS=str(streams))
    return cpu


def openvino_options(precision: str, threads: int | None, streams: int = 1) -> dict[str, str]:
    """The plugin's provider options: OpenVINO's own settings go in its `load_config`."""
    return {"load_config": json.dumps({"CPU": openvino_config(precision, threads, streams)})}
