"""Machine facts every report starts with: CPU model, clock, instruction sets, cores, load,
package versions, and the peaks the GFLOP/s figures are read against.

The peaks are cores × operations per cycle × clock, the operations per cycle derived from the
CPU's flags (`peak_model`, a pure function of the flag set, vendor and family):

    fp32  SSE 4 lanes × (1 add + 1 mul) = 8 · AVX 8 lanes × (add + mul) = 16 ·
          AVX2+FMA 2 FMA units × 8 lanes × 2 = 32 · AVX-512 2 units × 16 lanes × 2 = 64
    int8  (2 operations per multiply-add, as for FLOP) VNNI vpdpbusd: 4 products per 32-bit
          lane where an FMA does 1, so 4 × fp32 at the same width; without VNNI, vpmaddubsw +
          vpmaddwd: 2 × fp32; AMX: not modelled (its tile throughput depends on more than
          flags), so int8 figures on an AMX CPU carry no % of peak.

How many 512-bit FMA units a core has is not in the flags: Intel Xeon Gold 6xxx/Platinum and
every Xeon from Ice Lake-SP on have 2, older Bronze/Silver/Gold 5xxx 1; AMD Zen 4 runs AVX-512
on 256-bit units (1 per cycle), Zen 5 desktop/server parts have 2 and mobile ones 1. The model
says which it assumed, and the report prints it. A measured figure above the modelled peak is
printed as such ("peak model wrong"), never as more than 100%.
"""
from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import asdict, dataclass
from datetime import datetime
from importlib import metadata

# cores: the CPUs this process may run on, which the runtime splits its threads from
from bertonnx.runtime.core.cpu import cpu_flags, cpuinfo_field, usable_cpus as cores

VERSION_PACKAGES = ("bertonnx", "numpy", "onnxruntime", "tokenizers", "torch", "transformers",
                    "optimum", "optimum-onnx")
# The /proc/cpuinfo flags onnxruntime's CPU kernels choose between (x86, then Arm names);
# the hundred others (page tables, virtualisation) say nothing about these figures.
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl",
                "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile",
                "asimd", "asimddp", "sve", "sve2", "i8mm", "bf16")


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
        return float(cpuinfo_field("cpu MHz") or "") / 1000
    except ValueError:
        return 0.0


def cpu_model() -> str:
    return cpuinfo_field("model name") or platform.processor() or platform.machine()


def instruction_sets() -> list[str]:
    """The kernel-relevant instruction sets this CPU reports, in KERNEL_FLAGS order."""
    flags = cpu_flags()
    return [f for f in KERNEL_FLAGS if f in flags]


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


@dataclass(frozen=True)
class PeakModel:
    """Operations per cycle per core, and what they rest on."""
    fp32_flop_per_cycle: int
    int8_op_per_cycle: int | None   # None: not modelled (AMX)
    fp32_basis: str                 # how the fp32 figure was derived, with its assumption
    int8_basis: str


def _fma_units_512(vendor: str, family: int | None) -> tuple[int, str]:
    """512-bit FMA issue per cycle, and the words that say why (see the module docstring)."""
    if vendor == "AuthenticAMD" and family == 25:
        return 1, "Zen 4 runs AVX-512 on 256-bit units: 1 512-bit FMA per cycle"
    if vendor == "AuthenticAMD":
        return 2, ("2 512-bit FMA units assumed (Zen 5 desktop/server; mobile Zen 5 has 1: "
                   "then half)")
    return 2, ("2 512-bit FMA units assumed (Xeon Gold 6xxx/Platinum, Ice Lake-SP and later; "
               "older Bronze/Silver/Gold 5xxx have 1: then half)")


def peak_model(flags, vendor: str = "", family: int | None = None,
               model: int | None = None) -> PeakModel:
    """Per-core fp32 FLOP/cycle and int8 op/cycle from /proc/cpuinfo's flags (pure)."""
    f = set(flags)
    if "avx512f" in f:
        units, why = _fma_units_512(vendor, family)
        fp32, basis = units * 16 * 2, f"AVX-512: {units} × 16 lanes × 2 FLOP; {why}"
    elif "avx2" in f and "fma" in f:
        if vendor == "AuthenticAMD" and family == 23 and model is not None and model < 0x30:
            fp32, basis = 16, "AVX2+FMA on Zen/Zen+'s 128-bit units: 2 × 4 lanes × 2 FLOP"
        else:
            fp32, basis = 32, "AVX2+FMA: 2 FMA units × 8 lanes × 2 FLOP"
    elif "avx" in f:
        fp32, basis = 16, "AVX without FMA: 8 lanes × (1 add + 1 mul)"
    elif "asimd" in f:
        fp32, basis = 16, "NEON: 2 × 128-bit FMA units assumed × 4 lanes × 2 FLOP"
    else:
        fp32, basis = 8, "SSE: 4 lanes × (1 add + 1 mul)"
    if "amx_int8" in f:
        return PeakModel(fp32, None, basis, "AMX present (amx_int8), peak not modelled")
    if "avx512_vnni" in f and "avx512f" in f:
        return PeakModel(fp32, 4 * fp32, basis, "AVX-512 VNNI: 4 × the fp32 FMA rate")
    if "avx_vnni" in f or "avx512_vnni" in f:  # 256-bit VNNI
        width = min(fp32, 32)
        return PeakModel(fp32, 4 * width, basis, "AVX-VNNI (256-bit): 4 × a 256-bit FMA rate")
    if "avx2" in f or "avx512bw" in f:
        return PeakModel(fp32, 2 * fp32, basis, "no VNNI: vpmaddubsw + vpmaddwd, 2 × the fp32 "
                                                "rate at best")
    return PeakModel(fp32, None, basis, "no int8 dot-product instructions: not modelled")


def cpu_peak_model() -> PeakModel:
    """This machine's PeakModel (first CPU's flags, vendor, family, model)."""
    flags = cpu_flags()

    def number(key):
        try:
            return int(cpuinfo_field(key) or "")
        except ValueError:
            return None
    return peak_model(flags, cpuinfo_field("vendor_id") or "", number("cpu family"),
                      number("model"))


def percent_of_peak(achieved: float, peak: float | None) -> tuple[float | None, str]:
    """(percent, note): None with a note when there is no model, or when the figure is above
    the modelled peak — that says the model is wrong for this CPU, not that it ran at 130%."""
    if not peak:
        return None, "no peak model"
    pct = 100 * achieved / peak
    if pct > 100:
        return None, f"measured above the modelled peak ({pct:.0f}%): the peak model is wrong here"
    return pct, ""


def machine_info(threads: int) -> dict:
    n, ghz = cores(), cpu_clock_ghz()
    pm = cpu_peak_model()
    int8 = pm.int8_op_per_cycle
    return {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "cpu": cpu_model(),
            "cores": n, "clock_ghz": round(ghz, 3), "isa": instruction_sets(),
            "peak_gflops": round(n * pm.fp32_flop_per_cycle * ghz, 1),
            "int8_peak_gops": round(n * int8 * ghz, 1) if int8 else None,
            "peak_model": asdict(pm), "threads": threads,
            "load_avg": load_avg(), "versions": versions()}
