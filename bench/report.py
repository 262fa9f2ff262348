"""One result structure per run, and the two ways it is shown: a text table and JSON.

Both are built from `Result` alone: a preset adds to it (targets, notes), never to the text.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class Result:
    machine: dict                 # machine_info() + what engines set process-wide + notes
    options: dict                 # the BenchOptions it ran with
    baseline: str | None = None   # the end-to-end engine ratios and agreement are against
    text_set: dict = field(default_factory=dict)
    end_to_end: dict = field(default_factory=dict)   # engine -> {items_per_s, seconds, agreement}
    latency: dict = field(default_factory=dict)      # engine -> {seq: stats(ms)}
    throughput: dict = field(default_factory=dict)   # engine -> {ms, seq_per_s, gflops, pct_peak}
    cold_start: dict = field(default_factory=dict)   # name -> {wall_s, peak_rss_mib, argv}
    sizes: dict = field(default_factory=dict)        # name -> {total_mb, weights_mb}
    ratios: dict = field(default_factory=dict)       # name -> measured ratio
    targets: dict = field(default_factory=dict)      # name -> {value, bound, met, rule}

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def format_report(r: Result) -> str:
    lines = _header(r.machine)
    for section in (_texts, _end_to_end, _latency, _throughput, _cold_start, _sizes,
                    _targets if r.targets else _ratios):
        lines += section(r)
    lines += [f"  note: {note}" for note in r.machine.get("notes", [])]
    return "\n".join(lines)


def peak_lines(m: dict) -> list[str]:
    """The peaks and what they rest on (machine.peak_model), as the report prints them."""
    pm = m["peak_model"]
    int8 = (f"int8 peak {m['int8_peak_gops']} GOP/s ({m['cores']} × "
            f"{pm['int8_op_per_cycle']} op/cycle; {pm['int8_basis']})"
            if m.get("int8_peak_gops") else f"int8 peak: {pm['int8_basis']}")
    return [f"fp32 peak {m['peak_gflops']} GFLOP/s ({m['cores']} × {pm['fp32_flop_per_cycle']} "
            f"FLOP/cycle × {m['clock_ghz']} GHz; {pm['fp32_basis']})", int8]


def _header(m: dict) -> list[str]:
    isa = f" ({' '.join(m['isa'])})" if m.get("isa") else ""
    torch_threads = f" ({m['torch_threads']})" if m.get("torch_threads") else ""
    return [
        f"bertonnx bench · {m['date']} · {m['cpu']}, {m['cores']} cores @ {m['clock_ghz']} GHz"
        f"{isa}", *peak_lines(m),
        f"threads {m['threads']}{torch_threads} · load avg {' '.join(map(str, m['load_avg']))}"
        " · " + " · ".join(f"{k} {val}" for k, val in m["versions"].items()),
    ]


def _texts(r: Result) -> list[str]:
    if not r.text_set:
        return []
    t = r.text_set
    return [f"texts: {t['count']} (tokens median {t['tokens_median']}, p90 {t['tokens_p90']}, "
            f"max {t['tokens_max']}; {t['over_max_length']} over {t['max_length']}, truncated "
            "by every engine)"]


def _end_to_end(r: Result) -> list[str]:
    if not r.end_to_end:
        return []
    vectors = any("cosine" in row for row in r.end_to_end.values())
    column = "cosine mean / worst" if vectors else "agree"
    lines = ["", f"{'end to end (tokenize → run → post-process)':<52} {'items/s':>9} "
                 f"{'median s':>9} {'× base':>7} {column:>6}"]
    base = r.end_to_end.get(r.baseline, {}).get("items_per_s")
    for name, row in r.end_to_end.items():
        ratio = f"{row['items_per_s'] / base:7.2f}" if base else f"{'':7}"
        agree = f"{row['agreement']:6.3f}" if "agreement" in row else f"{'':6}"
        if "cosine" in row:
            agree = f"{row['cosine']['mean']:.6f} / {row['cosine']['worst']:.6f}"
        lines.append(f"  {name:<50} {row['items_per_s']:9.1f} "
                     f"{row['seconds']['median']:9.3f} {ratio} {agree}")
    if base:
        said = ("cosine: each text's vector to its, mean / worst" if vectors
                else "agree: top answer equal to it")
        lines.append(f"  (× base: relative to {r.baseline}; {said})")
    return lines


def _latency(r: Result) -> list[str]:
    if not r.latency:
        return []
    seqs = list(next(iter(r.latency.values())))
    head = "".join(f"{'s=' + s + ' med/p90 ms':>22}" for s in seqs)
    lines = ["", f"{'latency, batch 1':<52}{head}"]
    for name, row in r.latency.items():
        cells = "".join(f"{row[s]['median']:>13.2f} /{row[s]['p90']:>7.2f}" for s in seqs)
        lines.append(f"  {name:<50}{cells}")
    return lines


def _throughput(r: Result) -> list[str]:
    if not r.throughput:
        return []
    title = f"throughput, batch {r.options['batch']} × seq {r.options['batch_seq']}"
    lines = ["", f"{title:<52}{'ms/batch':>10} {'seq/s':>8} {'GOP/s':>8} {'% peak':>7}"]
    marks: dict[str, str] = {}  # note -> its footnote mark, one per distinct note
    for name, row in r.throughput.items():
        pct = row["pct_peak"]
        if pct is None:
            note = row.get("peak_note") or "no peak model"
            marks.setdefault(note, "*" * (len(marks) + 1))
        cell = f"{pct:7.1f}" if pct is not None else f"{marks[note]:>7}"
        lines.append(f"  {name:<50}{row['ms']:10.1f} {row['seq_per_s']:8.1f} "
                     f"{row['gflops']:8.1f} {cell}")
    return lines + ["  (GOP/s: matmul operations, 2 per multiply-add; % of the peak of the row's "
                    "precision)"] + [f"  {mark} {note}" for note, mark in marks.items()]


def _cold_start(r: Result) -> list[str]:
    if not r.cold_start:
        return []
    lines = ["", f"{'cold start (fresh process, first answer)':<52}{'wall s':>10} "
                 f"{'peak RSS MiB':>13}"]
    for name, row in r.cold_start.items():
        lines.append(f"  {name:<50}{row['wall_s']['median']:10.2f} {row['peak_rss_mib']:13.0f}")
    return lines


def _sizes(r: Result) -> list[str]:
    if not r.sizes:
        return []
    lines = ["", f"{'artifact size':<52}{'weights MB':>10} {'folder MB':>10}"]
    for name, row in r.sizes.items():
        lines.append(f"  {name:<50}{row['weights_mb']:10.1f} {row['total_mb']:10.1f}")
    return lines


def _ratios(r: Result) -> list[str]:
    if not r.ratios:
        return []
    return ["", "ratios (measured side by side in this run)"] + [
        f"  {name:<70} {val:.2f}" for name, val in r.ratios.items()]


def _targets(r: Result) -> list[str]:
    return ["", "targets (ratios measured side by side in this run)"] + [
        f"  {name:<66} {row['value']:7.2f}  {row['rule']:<7.6} {'met' if row['met'] else 'MISSED'}"
        for name, row in r.targets.items()]
