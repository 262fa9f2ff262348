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

import functools
import logging
import os
import shlex
from pathlib import Path

from . import defaults
from .once import first_time

# Each kind's int8 recipes in the order export tries them (export/int8/evidence.toml): export's
# TARGETS table (export/int8/recipes.py) is built from it, and the runtime reads it to tell
# whether a re-export here would make another graph than the one it holds.
# VNNI and AMX sum into int32, so their first recipe is the most accurate one,
# s8-smooth-qkv-widest-fp32 (SmoothQuant of every quantized input, the MatMul with the widest
# input fp32): all-MiniLM-L6-v2 closer to fp32 than CTranslate2's int8 (cosine on 2,560
# held-out texts, mean / worst: sentences 0.9982 / 0.9953, passages 0.9981 / 0.9962, against
# s8-smooth-qkv's 0.9973 / 0.9931 and 0.9968 / 0.9885) at 0.93x its speed end to end and
# 1.04-1.17x CTranslate2 int8's (AMD EPYC Zen 4, 2 threads; docs/int8.md). AVX2's 7-bit
# weights get the same recipe with them: 0.9967 / 0.9922 and 0.9961 / 0.9916, where
# s8-rr-smooth-qkv fell to 0.9896 (speed on AVX2 not measured; on Zen 4 0.84-0.92x s8-rr's).
# Each row's later recipes are what the gate falls back to.
RECIPE_ORDER = {
    "avx2": ("s8-rr-smooth-qkv-widest-fp32", "s8-rr", "s8-rr-smooth"),
    "avx512": ("s8-rr-smooth-qkv-widest-fp32", "s8-rr", "s8-rr-smooth"),
    "avx512-vnni": ("s8-smooth-qkv-widest-fp32", "s8-smooth-qkv", "s8-smooth", "s8", "s8-rr",
                    "s8-attention-fp32", "static"),
    "amx": ("s8-smooth-qkv-widest-fp32", "s8-smooth-qkv", "s8-smooth", "s8", "s8-rr",
            "s8-attention-fp32", "static"),
}
TARGET_KINDS = tuple(RECIPE_ORDER)
CPUINFO = Path("/proc/cpuinfo")

log = logging.getLogger("bertonnx")


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


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's share, not the host's):
    what thread and stream counts are split from."""
    return len(os.sched_getaffinity(0))


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
    return _kind_of(CPUINFO)


# Every load asks, and the CPU under a process does not change: read the file once. Keyed by
# the path, so a test that points CPUINFO at another file still reads that one.
@functools.cache
def _kind_of(path: Path) -> str | None:
    return target_kind(cpu_flags(path))


def warn_if_other_cpu(folder: Path, quantization: dict, kind: str | None = None, *,
                      source: str = "", task: str | None = None) -> bool:
    """One warning line per export folder and process when its int8 graph was made for
    another kind of CPU than this one, whose recipes differ from this kind's, naming the
    re-export that fixes it; True when it warned.

    Only advice the user can follow is given: for the shipped default or an export whose
    checkpoint (the manifest's `source`) is not at hand, the note goes to INFO instead."""
    target = quantization.get("target")
    here = kind if kind is not None else this_kind()
    if not target or here is None or target == here:
        return False
    row = RECIPE_ORDER.get(here, (None,))
    if quantization.get("recipe") == row[0] or RECIPE_ORDER.get(target) == row:
        return False  # a re-export here would try the same recipes: nothing to gain
    if not first_time("other-cpu", Path(folder).resolve(), target):
        return False
    made = (f"{folder} holds an int8 graph made for {target} CPUs (recipe "
            f"{quantization.get('recipe', '?')}); this CPU is {here}")
    if not _can_reexport(folder, source):
        log.info("%s: it runs, if perhaps slower than a graph made for this CPU", made)
        return False
    command = " ".join(shlex.quote(a) for a in (
        "bertonnx", "export", source, *(("--task", task) if task else ()), "--quantize", "int8",
        "--target-cpu", "auto", "--out", str(folder), "--force"))
    log.warning("%s: re-export with `%s` for this CPU's recipe", made, command)
    return True


def _can_reexport(folder: Path, source: str) -> bool:
    """Whether `bertonnx export SOURCE` can run here: the word `default`, a folder that exists,
    or a hub id; never for an export shipped inside this package (its checkpoint is not)."""
    if not source or Path(folder).resolve().is_relative_to(defaults.MODELS):
        return False
    if defaults.is_default(source) or Path(source).expanduser().is_dir():
        return True
    return defaults.HUB_ID.match(source) is not None and not source.startswith((".", "~"))
