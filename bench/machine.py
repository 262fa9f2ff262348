"""Machine facts every report starts with: CPU model, clock, instruction sets, cores, load,
package versions, and the fp32 peak the GFLOP/s figures are read against.

The peak is cores × 32 FLOP/cycle × clock — AVX2's two FMA units × 8 fp32 lanes × 2 FLOP.
On an AVX-512 machine onnxruntime's MLAS may go past it; the instruction sets are listed so a
reader can tell (and so can an int8 figure: VNNI decides whether int8 GEMMs beat fp32).
"""
from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime
from importlib import metadata
from pathlib import Path

FLOP_PER_CYCLE = 32  # AVX2: 2 FMA units × 8 fp32 lanes × 2 FLOP (mul + add) per core per cycle
VERSION_PACKAGES = ("bertonnx", "numpy", "onnxruntime", "tokenizers", "torch", "transformers",
                    "optimum", "optimum-onnx")
# The /proc/cpuinfo flags onnxruntime's CPU kernels choose between (x86, then Arm names);
# the hundred others (page tables, virtualisation) say nothing about these figures.
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile",
                "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16")
CPUINFO = Path("/proc/cpuinfo")


def _cpuinfo_field(*keys: str) -> str | None:
    """The first `key : value` line of /proc/cpuinfo for any of `keys` (the first CPU's)."""
    try:
        for line in CPUINFO.read_text().splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() in keys:
                return value.strip()
    except OSError:
        pass
    return None


def cpu_clock_ghz() -> float:
    """The clock the peak is computed from: lscpu's max MHz when the VM exposes it, else the
    (nominal) `cpu MHz` of /proc/cpuinfo. Turbo above it makes the % of peak optimistic."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            if line.startswith("CPU max MHz:"):
                return float(line.split(":")[1]) / 1000
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        return float(_cpuinfo_field("cpu MHz") or "") / 1000
    except ValueError:
        return 0.0


def cpu_model() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def instruction_sets() -> list[str]:
    """The kernel-relevant instruction sets this CPU reports, in KERNEL_FLAGS order."""
    flags = set((_cpuinfo_field("flags", "Features") or "").split())
    return [f for f in KERNEL_FLAGS if f in flags]


def cores() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's)."""
    return len(os.sched_getaffinity(0))


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in VERSION_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine_info(threads: int) -> dict:
    n, ghz = cores(), cpu_clock_ghz()
    return {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "cores": n, "clock_ghz": round(ghz, 3), "isa": instruction_sets(),
            "peak_gflops": round(n * FLOP_PER_CYCLE * ghz, 1), "threads": threads,
            "load_avg": load_avg(), "versions": versions()}
