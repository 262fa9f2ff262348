"""The families benchmark's report (families.py's result dict): the machine, then one markdown
table of every family × engine, then what each family's figures rest on."""
from __future__ import annotations

from .report import peak_lines

RANDOM_NOTE = ("{names}: random weights (seeded), in the shapes below — speed depends on the "
               "shape alone, but their agreement figures say little (a random model gives "
               "near-equal logits, which int8's rounding reorders)")


def _num(value, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def format_families(result: dict) -> str:
    m = result["machine"]
    lines = [f"bertonnx families bench · {m['date']} · CPU: {m['cpu']}, {m['cores']} cores @ "
             f"{m['clock_ghz']} GHz · threads {m['threads']} · load avg "
             f"{' '.join(map(str, m['load_avg']))}",
             f"instruction sets: {' '.join(m['isa']) or 'none reported'}", *peak_lines(m),
             " · ".join(f"{k} {v}" for k, v in m["versions"].items())]
    if result["families"]:
        lines += table(result)
    for f in result.get("prepared", []):
        lines += [f"- prepared {f['family']} ({f['checkpoint']}), nothing timed"] + [
            f"  - {n}" for n in f["notes"]]
    lines += [f"- skipped {s['family']}: {s['reason']}" for s in result["skipped"]]
    return "\n".join(lines) + "\n"


def table(result: dict) -> list[str]:
    """The family × engine table, then what each family's figures rest on."""
    o = result["options"]
    lines = ["", f"end to end: {o['texts']} mixed texts (tweets and passages of tweets), "
             f"tokenize → run → post-process; model only: batch {o['batch']} × seq "
             f"{o['batch_seq']} random ids; warm-up {o['warmup']}, {o['repeats']} rounds "
             "round-robin, medians", "",
             f"| family | engine | end to end texts/s | × Optimum int8 | × transformers | "
             f"model only ms (b={o['batch']} s={o['batch_seq']}) | × Optimum int8 | "
             f"× transformers | agreement |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for f in result["families"]:
        family = f"{f['title']} ({f['weights']})"
        for r in f["rows"]:
            lines.append(
                f"| {family} | {r['engine']} | {_num(r['texts_per_s'], '.1f')} | "
                f"{_num(r['e2e_vs_optimum_int8'], '.2f')} | "
                f"{_num(r['e2e_vs_transformers'], '.2f')} | {_num(r['model_ms'], '.1f')} | "
                f"{_num(r['model_vs_optimum_int8'], '.2f')} | "
                f"{_num(r['model_vs_transformers'], '.2f')} | {_num(r['agreement'], '.3f')} |")
    lines += ["", "- × columns: speed ratios measured side by side in this run (> 1: faster "
              "than Optimum's dynamic int8, or than transformers: its pipeline end to end, its "
              "torch model alone model-only)",
              "- agreement: the share of texts whose top label equals the transformers "
              "pipeline's (fp32 torch): for the int8 rows, int8's agreement with fp32"]
    random = [f["title"] for f in result["families"] if f["weights"] == "random"]
    if random:
        lines.append("- " + RANDOM_NOTE.format(names=", ".join(random)))
    for f in result["families"]:
        t, c = f["text_set"], f["config"]
        lines.append(f"- {f['title']}: {f['source']} (hidden {c['hidden_size']}, "
                     f"{c['num_hidden_layers']} layers, vocab {c['vocab_size']}); tokenizer: "
                     f"{f['tokenizer']}; texts: tokens median {t['tokens_median']}, p90 "
                     f"{t['tokens_p90']}, max {t['tokens_max']}, {t['over_max_length']} over "
                     f"{t['max_length']}; {f['torch_threads'] or ''}")
        lines += [f"  - {n}" for n in f["notes"]]
        cold = f["result"]["cold_start"]
        lines += [f"  - cold start {name}: {row['wall_s']['median']:.2f} s, "
                  f"{row['peak_rss_mib']:.0f} MiB peak RSS" for name, row in cold.items()]
    return lines
