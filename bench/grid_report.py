"""The model-only grid's report (grid.py's result dict): per cell each engine's median ms with
its spread, bertonnx int8's ratio to CTranslate2 int8 and to Optimum's int8 (sentence-
transformers' ONNX int8), then each engine's accuracy to the torch fp32 model."""
from __future__ import annotations

OURS = "bertonnx int8"
# issue 30's model-only peers for bertonnx int8, by row-name prefix: its goals are ratios to them
PEERS = {"CTranslate2 int8": "CTranslate2 int8", "Optimum int8": "sentence-transformers onnx int8"}


def _peer(engines, prefix: str) -> str | None:
    return next((e for e in engines if e.startswith(prefix)), None)


def format_grid(result: dict) -> str:
    m = result["machine"]
    engines = list(result["engines"])
    peers = {label: _peer(engines, prefix) for label, prefix in PEERS.items()}
    peers = {k: v for k, v in peers.items() if v and OURS in engines}
    lines = [f"bertonnx model-only grid · {m['date']} · {m['cpu']}, {m['cores']} cores @ "
             f"{m['clock_ghz']} GHz ({' '.join(m['isa'])}) · threads {m['threads']}",
             " · ".join(f"{k} {v}" for k, v in m["versions"].items()),
             f"model {result['model']} · {result['options']['rounds']} rounds, order rotated · "
             f"ms per forward: median (min–max) · load average at start "
             f"{'/'.join(f'{x:g}' for x in m['load_avg'])}, at end "
             f"{'/'.join(f'{x:g}' for x in m['load_avg_end'])}", "",
             "| batch × length | " + " | ".join(engines) + "".join(
                 f" | {OURS} vs {label}" for label in peers) + " |",
             "|---" * (1 + len(engines) + len(peers)) + "|"]
    for c in result["cells"]:
        ms = c["ms"]
        row = [f"{ms[e]['median']:.1f} ({ms[e]['min']:.1f}–{ms[e]['max']:.1f})" for e in engines]
        ratios = [f"**{ms[p]['median'] / ms[OURS]['median']:.2f}×**" for p in peers.values()]
        lines.append(f"| {c['batch']} × {c['length']} | " + " | ".join(row + ratios) + " |")
    lines += ["", f"Accuracy: mean-pooled hidden states of {result['options']['texts']} held-out "
              f"prose sentences ({result['prose_tokens']} tokens), cosine to "
              f"{result['reference']}:", "", "| engine | precision | cosine mean | worst |",
              "|---|---|---|---|"]
    for e in engines:
        a = result["accuracy"][e]
        lines.append(f"| {e} | {result['engines'][e]} | {a['cosine_mean']:.4f} | "
                     f"{a['cosine_min']:.4f} |")
    lines += [f"- skipped {s['name']}: {s['reason']}" for s in result["skipped"]]
    return "\n".join(lines) + "\n"
