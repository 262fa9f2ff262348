"""The retrieval benchmark's report (retrieval.py's result dict): a markdown table per task,
fastest first, with the spread of its rounds, the ratio to the peer library's fastest backend
(sentence-transformers'; transformers' for classification), the accuracy beside each figure, and issue 27's goal judged per bertonnx row."""
from __future__ import annotations

GOAL_TASKS = ("rerank", "sparse")  # issue 27 sets the 2× goal for these two; embed is reported


def format_retrieval(result: dict) -> str:
    """Markdown: the machine line, then per task its table and the goal's verdict."""
    m = result["machine"]
    lines = [f"bertonnx retrieval bench · {m['date']} · {m['cpu']}, {m['cores']} cores @ "
             f"{m['clock_ghz']} GHz ({' '.join(m['isa'])}) · threads {m['threads']}",
             " · ".join(f"{k} {v}" for k, v in m["versions"].items())]
    for t in result["tasks"]:
        tok = t["tokens"]
        # a metric's own bars (|Δp|) would split the Markdown table's header cell
        metric = t["rows"][0]["accuracy"]["metric"].replace("|", "\\|")
        lines += ["", f"### {t['task']}: {t['label']} · {t['work']} (tokens median "
                  f"{tok['tokens_median']}, p90 {tok['tokens_p90']}, max {tok['tokens_max']})",
                  "load average before each round (1/5/15 min): " + " · ".join(
                      "/".join(f"{x:g}" for x in la) for la in t["loads"]),
                  "", f"| engine | precision | {t['unit']} (median) | min–max | × fastest "
                  f"{t.get('peer_library', 'sentence-transformers')} | {metric} to "
                  f"{t['reference']}: mean / worst |",
                  "|---|---|---|---|---|---|"]
        for r in sorted(t["rows"], key=lambda r: -r["per_s"]):
            a = r["accuracy"]
            ratio = f"{r['vs_fastest_st']:.2f}" if r["vs_fastest_st"] else "—"
            lines.append(f"| {r['engine']} | {r['precision']} | {r['per_s']:.1f} | "
                         f"{r['per_s_min']:.1f}–{r['per_s_max']:.1f} | {ratio} | "
                         f"{a['mean']:.4f} / {a['worst']:.4f} |")
        lines += [f"- {v}" for v in t["facts"].values()]
        lines += [f"- skipped {s['name']}: {s['reason']}" for s in t["skipped"]]
        lines += goal_lines(t)
    return "\n".join(lines) + "\n"


def goal_lines(t: dict) -> list[str]:
    """Issue 27's goal: ≥ 2× sentence-transformers' fastest backend at equal or better
    accuracy (judged against that backend's accuracy to the same reference)."""
    if not t["fastest_st"] or t["task"] not in GOAL_TASKS:
        return []
    rows = {r["engine"]: r for r in t["rows"]}
    best = rows[t["fastest_st"]]
    out = []
    st = [r for r in t["rows"] if r["engine"].startswith("sentence-transformers")]
    for r in (r for r in t["rows"] if r["engine"].startswith("bertonnx")):
        mean = r["accuracy"]["mean"]
        fast = r["vs_fastest_st"] >= 2
        exact = mean >= best["accuracy"]["mean"] - 1e-4
        line = (f"- goal ≥ 2× {t['fastest_st']} at equal or better accuracy: {r['engine']} "
                f"{r['vs_fastest_st']:.2f}×, {r['accuracy']['metric']} mean {mean:.4f} vs "
                f"{best['accuracy']['mean']:.4f} — {'met' if fast and exact else 'missed'}")
        # the same question within a precision class: the fastest backend no more accurate
        peer = max((s for s in st if s["accuracy"]["mean"] <= mean + 1e-4),
                   key=lambda s: s["per_s"], default=None)
        if peer is not None and peer is not best:
            line += (f"; against the fastest backend no more accurate ({peer['engine']}, "
                     f"{peer['accuracy']['mean']:.4f}): {r['per_s'] / peer['per_s']:.2f}×")
        out.append(line)
    return out
