"""The CPU kind int8 graphs are made for (runtime/core/cpu.py): read from the flags, and the one
warning `load` gives when a graph made for another kind runs here."""
from __future__ import annotations

import logging

import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import cpu

AVX2 = {"sse2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}


@pytest.mark.parametrize("flags, kind", [
    (AVX2, "avx2"),                                           # Zen 3, Haswell..Comet Lake
    (AVX2 | {"avx_vnni"}, "avx512-vnni"),                     # Alder Lake: 256-bit VNNI
    (AVX512, "avx512"),                                       # Skylake-SP
    (AVX512 | {"avx512_vnni"}, "avx512-vnni"),                # Cascade Lake, Zen 4/5
    (AVX512 | {"avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"}, "amx"),  # Sapphire Rapids
    ({"sse2", "avx"}, None),                                  # no AVX2
    ({"asimd", "asimddp"}, None),                             # Arm
    (set(), None),                                            # no /proc/cpuinfo
])
def test_target_kind_from_flags(flags, kind):
    assert cpu.target_kind(flags) == kind
    assert kind is None or kind in cpu.TARGET_KINDS


def test_flags_are_the_first_cpus(tmp_path):
    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n\n"
                    "processor\t: 1\nflags\t\t: fpu amx_int8 amx_tile\n")
    assert cpu.target_kind(cpu.cpu_flags(fake)) == "avx512-vnni"
    assert cpu.cpu_flags(tmp_path / "missing") == set()


def test_warns_once_per_folder_when_the_graph_was_made_for_another_cpu(tmp_path, caplog,
                                                                      monkeypatch):
    monkeypatch.setattr(cpu, "_warned", set())
    q = {"mode": "int8", "target": "avx2", "recipe": "s8-rr"}
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        assert cpu.warn_if_other_cpu(tmp_path, q, kind="amx")
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind="amx")  # once
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind="avx2")  # made for this kind
        assert not cpu.warn_if_other_cpu(tmp_path, {"mode": "none"}, kind="amx")  # fp32
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "made for avx2 CPUs (recipe s8-rr); this CPU is amx" in lines[0]
    assert "--target-cpu auto" in lines[0]


def test_load_warns_for_a_graph_made_for_another_cpu(tiny_checkpoint, tmp_path, caplog,
                                                     monkeypatch):
    from bertonnx.export import ExportOptions, export_model  # torch: the other tests run without

    out = tmp_path / "int8-avx2"
    export_model(tiny_checkpoint("text-classification"), "text-classification", out,
                 ExportOptions(quantize="int8", target_cpu="avx2", parity=False))
    monkeypatch.setattr(cpu, "_warned", set())
    monkeypatch.setattr(cpu, "this_kind", lambda: "amx")
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
        load(out)
    warned = [r for r in caplog.records if "made for avx2 CPUs" in r.getMessage()]
    assert len(warned) == 1
    caplog.clear()
    monkeypatch.setattr(cpu, "this_kind", lambda: "avx2")
    monkeypatch.setattr(cpu, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
    assert not [r for r in caplog.records if "made for" in r.getMessage()]
