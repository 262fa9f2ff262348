"""The benchmarks' charts: one horizontal bar chart per claim, drawn from the benches' JSON.

    python -m bertonnx.bench.charts RESULT.json [MORE.json ...] --out docs/img/

Reads `python -m bertonnx.bench.retrieval --json` (one chart per task: `TASK-MODEL-CPUKIND.png`)
and `python -m bertonnx.bench.serve_peers --json` (one chart per file: `serve-NAME.png`, NAME
the JSON's stem). Each bar is an engine's median throughput with its rounds' min–max as the
error bar, fastest on top, bertonnx's rows coloured; beside each bar its accuracy to the
reference (mean / worst cosine, or NDCG@10), because a speed without its accuracy is not a
claim. The title names the CPU, threads, rounds and the load average the rounds were taken at.
Turning a result into `Chart` records is pure; only `draw` touches matplotlib (a bench-only
dependency, imported there, on its Agg backend: no display needed).
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bertonnx.runtime.core.errors import InputError


OURS, PEER = "#d9661f", "#7f8c9a"  # bertonnx's bars, every peer's


@dataclass(frozen=True)
class Bar:
    label: str                # engine (precision)
    value: float              # median throughput
    low: float                # slowest round
    high: float               # fastest round
    note: str                 # written beside the bar: figure and accuracy
    ours: bool


@dataclass(frozen=True)
class Chart:
    name: str                 # file stem
    title: str
    unit: str
    bars: tuple[Bar, ...]     # fastest first


def _accuracy(a: dict, reference: bool) -> str:
    if reference:
        return "reference"
    # 5 decimals: bf16 (0.99999) and fp32 (1.00000) differ only there
    return f"{a['metric']} {a['mean']:.5f} / {a['worst']:.5f}"


def cpu_kind(isa: list[str]) -> str:
    """The instruction set the engines are chosen by (runtime/core/cpu.py's kinds), for titles."""
    for flag, kind in (("amx_bf16", "AMX"), ("avx512_vnni", "AVX-512 VNNI"),
                       ("avx512f", "AVX-512"), ("avx2", "AVX2")):
        if flag in isa:
            return kind
    return "no AVX2"


def _loads(loads: list[list[float]]) -> str:
    one = [la[0] for la in loads]
    return f"load {min(one):g}–{max(one):g}" if one else "load not recorded"


def retrieval_charts(result: dict) -> list[Chart]:
    """One chart per task of a `bench.retrieval --json` result."""
    m = result["machine"]
    out = []
    for t in result["tasks"]:
        bars = []
        for r in sorted(t["rows"], key=lambda r: -r["per_s"]):
            best = "transformers" if t.get("peer_library") == "transformers" else "ST"
            ratio = (f" · {r['vs_fastest_st']:.2f}× {best} best" if r.get("vs_fastest_st")
                     else "")
            note = (f"{r['per_s']:.1f}{ratio} · "
                    f"{_accuracy(r['accuracy'], r['engine'] == t['reference'])}")
            bars.append(Bar(f"{r['engine']} ({r['precision']})", r["per_s"], r["per_s_min"],
                            r["per_s_max"], note, r["engine"].startswith("bertonnx")))
        rounds = len(t["rows"][0]["seconds"]) if t["rows"] else 0
        title = (f"{t['task']}: {t['label']} · {t['work']}\n"
                 f"{m['cpu']} ({cpu_kind(m['isa'])}), {m['cores']} cores, {m['threads']} threads · median of {rounds} "
                 f"rounds (bars: min–max) · {_loads(t['loads'])} · {m['date']}")
        # the CPU kind in the name: one task and model measured on two kinds are two charts
        name = f"{t['task']}-{_slug(t['label'].split()[0])}-{_slug(cpu_kind(m['isa']))}"
        out.append(Chart(name, title, t["unit"], tuple(bars)))
    return out


def serve_chart(result: dict, stem: str) -> Chart:
    """One chart of a `bench.serve_peers --json` result: a bar per server and request size."""
    bars = []
    for r in sorted(result["rows"], key=lambda r: (r["texts_per_request"], -r["texts_per_s"])):
        acc = (f"cosine {r['cosine_mean']:.4f} / {r['cosine_worst']:.4f}" if "cosine_mean" in r
               else "accuracy not measured")
        note = (f"{r['texts_per_s']:.1f} · p99 {r['p99_ms']:.0f} ms · RSS "
                f"{r['peak_rss_mb']:.0f} MB · {acc}")
        bars.append(Bar(f"{r['server']} ×{r['texts_per_request']}", r["texts_per_s"], r["min"],
                        r["max"], note, r["server"].startswith("bertonnx")))
    a = result.get("args", {})
    name, cores_, *flags = result["cpu"].split(", ")  # "MODEL, N cores, flag flag ..."
    cpu = f"{name} ({cpu_kind(' '.join(flags).split())}), {cores_}"
    title = (f"serving: OpenAI embeddings route, {a.get('clients', '?')} clients, "
             f"{a.get('seconds', '?')} s a run, texts per request ×N\n{cpu} · median "
             f"of {a.get('rounds', '?')} rounds (bars: min–max)")
    name = _slug(stem) if stem.startswith("serve") else f"serve-{_slug(stem)}"
    return Chart(name, title, "texts/s", tuple(bars))


def charts_of(result: dict, stem: str) -> list[Chart]:
    """The charts of one bench JSON, whichever bench wrote it."""
    if "tasks" in result and "machine" in result:
        return retrieval_charts(result)
    if "rows" in result and "cpu" in result:
        return [serve_chart(result, stem)]
    raise InputError(f"{stem}.json is neither bench.retrieval's nor bench.serve_peers' JSON",
                     "pass the JSON those benches write with --json")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def draw(chart: Chart, out: Path) -> Path:
    """`chart` as out/NAME.png: horizontal bars, fastest on top, the note beside each."""
    import matplotlib  # bench-only dependency (the [bench] extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): pyplot then needs no display

    bars = chart.bars[::-1]  # barh draws bottom-up: fastest last, so on top
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.42 * len(bars)))
    y = range(len(bars))
    ax.barh(y, [b.value for b in bars], color=[OURS if b.ours else PEER for b in bars],
            xerr=[[b.value - b.low for b in bars], [b.high - b.value for b in bars]],
            error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
    top = max((b.high for b in bars), default=1.0)
    for i, b in enumerate(bars):
        ax.text(b.high + top * 0.01, i, b.note, va="center", fontsize=8)
    ax.set_yticks(list(y), [b.label for b in bars], fontsize=8)
    ax.set_xlim(0, top * 1.75)  # room for the notes
    ax.set_xlabel(f"{chart.unit} (median; higher is faster)")
    ax.set_title(chart.title, fontsize=9, loc="left")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{chart.name}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the notes and title may pass the axes
    plt.close(fig)
    return path


def make_charts(results: list[Path], out: Path) -> list[Path]:
    """Every chart of every JSON in `results`, written under `out`."""
    return [draw(c, out) for p in results
            for c in charts_of(json.loads(Path(p).read_text()), Path(p).stem)]


if __name__ == "__main__":  # `python -m bertonnx.bench.charts`
    from bertonnx.runtime.cli.main import run_click

    from .commands import charts_command

    sys.exit(run_click(charts_command, prog_name="python -m bertonnx.bench.charts"))
