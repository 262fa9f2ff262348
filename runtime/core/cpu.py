"""Which kind of CPU this is, as far as int8 graphs care, and the warning when a graph made for
another kind runs here.

onnxruntime's int8 GEMMs (MLAS) take one of four paths on x86, and the best int8 recipe
differs between them (export/int8/recipes.py):

    avx2         AVX2 without VNNI: u8×s8 pairs summed in int16 (vpmaddubsw), which saturates
    avx512       the same, 512 bits wide
    avx512-vnni  VNNI (vpdpbusd; AVX-512 VNNI or the 256-bit AVX-VNNI): sums into int32
    amx          AMX int8 tiles (amx_int8): sums into int32, far higher throughput

Read from /proc/cpuinfo's flags (Linux); elsewhere, or on a CPU none of these fit (Arm, old
x86), the kind is None.
"""
from __future__ import annotations

import logging
from pathlib import Path

TARGET_KINDS = ("avx2", "avx512", "avx512-vnni", "amx")
CPUINFO = Path("/proc/cpuinfo")

log = logging.getLogger("bertonnx")
_warned: set = set()  # (folder, target) pairs already warned about in this process


def cpuinfo_field(*keys: str, path: Path | None = None) -> str | None:
    """The first `key : value` line of /proc/cpuinfo for any of `keys` (the first CPU's)."""
    try:
        for line in (path or CPUINFO).read_text().splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() in keys:
                return value.strip()
    except OSError:
        pass
    return None


def cpu_flags(path: Path | None = None) -> set[str]:
    return set((cpuinfo_field("flags", "Features", path=path) or "").split())


def target_kind(flags) -> str | None:
    """The kind of CPU a flag set describes (see the module docstring), or None."""
    f = set(flags)
    if "amx_int8" in f and "amx_tile" in f:
        return "amx"
    if "avx512_vnni" in f or "avx_vnni" in f:
        return "avx512-vnni"
    if "avx512f" in f and "avx512bw" in f:
        return "avx512"
    if "avx2" in f:
        return "avx2"
    return None


def this_kind() -> str | None:
    return target_kind(cpu_flags())


def warn_if_other_cpu(folder: Path, quantization: dict, kind: str | None = None) -> bool:
    """One warning line per export folder and process when its int8 graph was made for
    another kind of CPU than this one; True when it warned."""
    target = quantization.get("target")
    here = kind if kind is not None else this_kind()
    if not target or here is None or target == here:
        return False
    key = (Path(folder).resolve(), target)
    if key in _warned:
        return False
    _warned.add(key)
    log.warning("%s holds an int8 graph made for %s CPUs (recipe %s); this CPU is %s: "
                "re-export with `bertonnx export MODEL --quantize int8 --target-cpu auto` for "
                "the recipe measured fastest here", folder, target,
                quantization.get("recipe", "?"), here)
    return True
