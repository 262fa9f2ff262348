"""The CPU kind int8 graphs are made for (runtime/core/cpu.py): read from the flags, and the one
warning `load` gives when a graph made for another kind runs here."""
from __future__ import annotations

import logging

import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core import cpu, once

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
    monkeypatch.setattr(once, "_given", set())
    q = {"mode": "int8", "target": "avx2", "recipe": "s8-rr"}
    src = {"source": str(tmp_path), "task": "text-classification"}  # a checkpoint at hand
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        assert cpu.warn_if_other_cpu(tmp_path, q, kind="amx", **src)
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind="amx", **src)  # once
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind="avx2", **src)  # made for this kind
        assert not cpu.warn_if_other_cpu(tmp_path, {"mode": "none"}, kind="amx", **src)  # fp32
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "made for avx2 CPUs (recipe s8-rr); this CPU is amx" in lines[0]
    # the command names the real checkpoint and folder: no placeholder to fill in
    assert (f"re-export with `bertonnx export {tmp_path} --task text-classification --quantize "
            f"int8 --target-cpu auto --out {tmp_path} --force`") in lines[0]


@pytest.mark.parametrize("source", ["", "/gone/checkpoint", "runs/english-mlm8/checkpoint-1000"])
def test_no_reexport_advice_without_the_checkpoint(tmp_path, caplog, monkeypatch, source):
    """An export whose checkpoint is not at hand: a note at INFO, no advice to follow."""
    monkeypatch.setattr(once, "_given", set())
    q = {"mode": "int8", "target": "amx", "recipe": "s8"}
    with caplog.at_level(logging.INFO, logger="bertonnx"):
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind="avx2", source=source,
                                         task="fill-mask")
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "bertonnx export" not in caplog.text and "re-export" not in caplog.text


@pytest.mark.parametrize("target,recipe,here", [
    ("amx", "s8", "avx512-vnni"),      # one row for both: a re-export tries the same recipes
    ("avx512-vnni", "s8-smooth", "amx"),
    ("avx2", "s8-smooth-qkv-widest-fp32", "amx"),  # this CPU's first recipe already
])
def test_no_warning_when_a_reexport_here_would_try_the_same(tmp_path, caplog, monkeypatch,
                                                            target, recipe, here):
    monkeypatch.setattr(once, "_given", set())
    assert cpu.RECIPE_ORDER["amx"] == cpu.RECIPE_ORDER["avx512-vnni"]
    q = {"mode": "int8", "target": target, "recipe": recipe}
    with caplog.at_level(logging.INFO, logger="bertonnx"):
        assert not cpu.warn_if_other_cpu(tmp_path, q, kind=here, source=str(tmp_path),
                                         task="fill-mask")
    assert caplog.records == []


@pytest.mark.parametrize("kind", cpu.TARGET_KINDS)
def test_the_shipped_default_says_nothing_on_any_cpu(caplog, monkeypatch, kind):
    """Its graph is fp32 (no CPU kind to be made for) and its checkpoint is not the user's:
    no warning, no note, no advice, whatever this CPU is."""
    from bertonnx.runtime.core import defaults

    monkeypatch.setattr(once, "_given", set())
    monkeypatch.setattr(cpu, "this_kind", lambda: kind)
    with caplog.at_level(logging.INFO, logger="bertonnx"):
        fill = load("default")
    assert fill.folder.path == defaults.export_dir()
    assert "target" not in fill.folder.manifest.quantization
    assert not [r for r in caplog.records if "made for" in r.getMessage()
                or r.levelno >= logging.WARNING], caplog.text


def test_load_warns_for_a_graph_made_for_another_cpu(tiny_checkpoint, tmp_path, caplog,
                                                     monkeypatch):
    from bertonnx.export import export_model  # torch: the other tests run without

    from tests.int8_options import ort_int8

    out = tmp_path / "int8-avx2"
    export_model(tiny_checkpoint("text-classification"), "text-classification", out,
                 ort_int8(target_cpu="avx2", parity=False))
    monkeypatch.setattr(once, "_given", set())
    monkeypatch.setattr(cpu, "this_kind", lambda: "amx")
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
        load(out)
    warned = [r.getMessage() for r in caplog.records if "made for avx2 CPUs" in r.getMessage()]
    assert len(warned) == 1
    src = tiny_checkpoint("text-classification")
    assert f"`bertonnx export {src} --task text-classification --quantize int8" in warned[0]
    assert " MODEL " not in warned[0]
    caplog.clear()
    monkeypatch.setattr(cpu, "this_kind", lambda: "avx2")
    monkeypatch.setattr(once, "_given", set())
    with caplog.at_level(logging.WARNING, logger="bertonnx"):
        load(out)
    assert not [r for r in caplog.records if "made for" in r.getMessage()]
