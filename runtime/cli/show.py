"""How an inference command prints a task's answer when --json is not asked for: a small table.

One function per task (`SHOWN`); a task without one prints its JSON, so a new task's command
works before anyone writes its table. Each reads the pipeline's own answer, one result per
input (`Pipeline.per_input`), never a second computation.
"""
from __future__ import annotations

import json

import click
import numpy as np

from ..core.tensors import jsonable


def echo_json(obj) -> None:
    """The library's own result, as JSON."""
    click.echo(json.dumps(obj, ensure_ascii=False, indent=2, default=jsonable))


def table(rows: list[list], headers: list[str]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for j, r in enumerate(cells):
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            click.echo("  ".join("-" * w for w in widths))


def _fmt(v) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _fill_mask(pipe, read, params) -> None:
    out = pipe(read, **params)
    for text, res in zip(read.records, pipe.per_input(out, read)):
        click.echo(text)
        per_mask = res if res and isinstance(res[0], list) else [res]
        for m, props in enumerate(per_mask):
            if len(per_mask) > 1:
                click.echo(f"mask {m + 1}:")
            table([[p["token_str"], p["score"], p["sequence"]] for p in props],
                  ["token", "score", "sequence"])
        click.echo("")


def _classify(pipe, read, params) -> None:
    out = pipe(read, **params)
    rows = []
    for pair, labels in zip(read.records, pipe.per_input(out, read, **params)):
        labels = [labels] if isinstance(labels, dict) else labels   # the best one alone
        text = " | ".join(v for v in pair if v)
        for j, lab in enumerate(labels):
            rows.append([short(text) if j == 0 else "", lab["label"], lab["score"]])
    table(rows, ["text", "label", "score"])


def _qa(pipe, read, params) -> None:
    out = pipe(read, **params)
    rows = []
    for example, answers in zip(read.records, pipe.per_input(out, read)):
        answers = [answers] if isinstance(answers, dict) else answers   # top_k 1: the dict
        for j, a in enumerate(answers):
            rows.append([short(example.question) if j == 0 else "",
                         a["answer"] or "(no answer)", a["score"], a["start"], a["end"]])
    table(rows, ["question", "answer", "score", "start", "end"])


def _tokens(pipe, read, params) -> None:
    out = pipe(read, **params)
    for text, ents in zip(read.records, pipe.per_input(out, read)):
        click.echo(short(text, 100))
        if not ents:
            click.echo("  (no entities)")
            continue
        # one entity per token ("entity"), or grouped words ("entity_group")
        key = "entity" if "entity" in ents[0] else "entity_group"
        table([[e["word"], e[key], e["score"], e["start"], e["end"]] for e in ents],
              ["word", key.replace("_", " "), "score", "start", "end"])
        click.echo("")


def _embed(pipe, read, params) -> None:
    """The vectors' similarities by the model's own function, cosine unless a
    sentence-transformers folder says otherwise (one vector: its norm and first values)."""
    vecs = pipe(read.listed(), **{**params, "return_tensors": True})
    items = list(read.records)
    used = pipe.complete(params)   # the options given, the export's defaults for the rest
    click.echo(f"{len(items)} vector(s) of {vecs.shape[1]} dimensions ({used['pooling']} "
               f"pooling{', normalized' if used['normalize'] else ''})")
    if len(items) > 1:
        sims = pipe.similarity(vecs, vecs)
        table([[f"[{i}] {short(t, 40)}", *sims[i].round(4).tolist()]
               for i, t in enumerate(items)],
              [pipe.similarity_fn_name, *[f"[{i}]" for i in range(len(items))]])
    else:
        v = np.asarray(vecs[0])
        click.echo(f"norm {np.linalg.norm(v):.4f}  first values "
                   + " ".join(f"{x:+.4f}" for x in v[:8]))


def _rerank(pipe, read, params) -> None:
    out = pipe(read, **params)
    for example, ranked in zip(read.records, pipe.per_input(out, read)):
        click.echo(short(example.query, 100))
        table([[j + 1, r["corpus_id"], r["score"], short(example.documents[r["corpus_id"]])]
               for j, r in enumerate(ranked)], ["rank", "doc", "score", "document"])
        click.echo("")


def _zero_shot(pipe, read, params) -> None:
    out = pipe(read, **params)
    rows = []
    for text, res in zip(read.records, pipe.per_input(out, read)):
        for j, (label, score) in enumerate(zip(res["labels"], res["scores"])):
            rows.append([short(text) if j == 0 else "", label, score])
    table(rows, ["text", "label", "score"])


def _sparse(pipe, read, params, shown: int = 10) -> None:
    """Each text's heaviest vocabulary weights, with their tokens."""
    out = pipe(read, **{**params, "return_tokens": True})
    for text, entries in zip(read.records, pipe.per_input(out, read)):
        click.echo(f"{short(text, 100)}  ({len(entries)} non-zero weights"
                   + (f", the {shown} heaviest shown; --json for all)" if len(entries) > shown
                      else ")"))
        table([[e["token"], e["index"], e["value"]] for e in entries[:shown]],
              ["token", "index", "weight"])
        click.echo("")


def _multi(pipe, read, params) -> None:
    """Each text's token vectors: how many PyLate keeps, and the first values of the first."""
    out = pipe.per_input(pipe(read, **params), read)
    kind = "query" if pipe.complete(params)["is_query"] else "document"
    table([[f"[{i}] {short(t, 40)}", len(v), v.shape[1],
            " ".join(f"{x:+.3f}" for x in v[0][:4])]
           for i, (t, v) in enumerate(zip(read.records, out))],
          [f"{kind} text", "tokens", "dims", "first token"])


def _m3(pipe, read, params, shown: int = 5) -> None:
    """Each text's BGE-M3 outputs in one row: the dense vector's first values, the heaviest
    lexical weights with their tokens, how many colbert vectors (--json: every value)."""
    out = pipe.per_input(pipe(read, **params), read)
    rows = []
    for i, (text, r) in enumerate(zip(read.records, out)):
        dense = r.get("dense_vecs")
        weights = r.get("lexical_weights")
        colbert = r.get("colbert_vecs")
        rows.append([f"[{i}] {short(text, 30)}",
                     "" if dense is None else " ".join(f"{x:+.3f}" for x in dense[:3]),
                     "" if weights is None else " ".join(
                         f"{pipe.tokenizer.id_to_token(e['index'])}:{e['value']:.2f}"
                         for e in weights[:shown]),
                     "" if colbert is None else f"{colbert.shape[0]} x {colbert.shape[1]}"])
    table(rows, ["text", "dense", "lexical weights (heaviest)", "colbert"])


SHOWN = {"fill-mask": _fill_mask, "text-classification": _classify,
         "question-answering": _qa, "token-classification": _tokens,
         "feature-extraction": _embed, "text-ranking": _rerank,
         "zero-shot-classification": _zero_shot, "sparse-embedding": _sparse,
         "multi-vector": _multi, "bge-m3": _m3}


def show(task: str, pipe, read, params: dict) -> None:
    """The answer as the task's table, or as JSON where the task has none."""
    shown = SHOWN.get(task)
    if shown is None:
        return echo_json(pipe(read, **params))
    shown(pipe, read, params)
