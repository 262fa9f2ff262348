"""The families' comparison: MPNet, DeBERTa-v3 and ModernBERT, bertonnx fp32/int8 against
Optimum's export of the same checkpoint and the transformers pipeline, in one run.

    python -m bertonnx.bench.families --prepare  # checkpoints and exports only (reused later)
    python -m bertonnx.bench.families            # three base-sized models (≈18 min, 2 cores)
    python -m bertonnx.bench.families --quick    # tiny random models of all three (≈30 s)

Per family, one checkpoint (family_models.py: the real all-mpnet-base-v2; DeBERTa-v3 and
ModernBERT in their base shapes with random weights, or real folders given) runs compare.py's
machinery — bertonnx fp32 fused and int8, Optimum O2 and its documented dynamic int8,
the scratch torch model, the transformers pipeline and its model alone — end to end on the same
mixed texts and model-only on the same feeds, round-robin. One markdown table then puts every
family × engine side by side, with ratios to Optimum int8 and to transformers.

Where the Optimum export of a family fails, the error is a note and Optimum is left out of that
family only; where bertonnx's int8 agreement gate refuses random weights (their near-equal
logits), the int8 graph is exported ungated and the note says so: speed is what these rows
measure.
"""
from __future__ import annotations

import gc
import json
import shutil
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bertonnx.runtime.core.cpu import this_kind
from bertonnx.runtime.core.errors import CheckFailed
from bertonnx.runtime.core.manifest import Manifest

from .compare import NAMES, CompareOptions, compare, has_optimum, ours
from .family_models import FAMILIES, Checkpoint, make_checkpoint
from .machine import machine_info
from .optimum import OPTIMUM_CONFIG, optimum_artifacts
from .runner import BenchOptions

# Sizes that fit three base-sized models in about 18 minutes on 2 cores once exported (the
# published run, docs/benchmarks-history.md "Families", took 18 min 25 s on a 2-core Zen 4): 32
# mixed
# texts (≈4900 tokens), 6 engines end to end, warm-up + 5 rounds, model-only at b8 × s128.
# Latency is left to compare.py.
FULL = dict(texts=32, repeats=5, warmup=1, latency_seqs=(), batch=8, batch_seq=128,
            pipeline_batch_sizes=(1, 8), cold_start=False, cold_repeats=1)
QUICK = dict(texts=8, repeats=1, warmup=0, latency_seqs=(), batch=2, batch_seq=16,
             pipeline_batch_sizes=(4,), cold_start=False, cold_repeats=1)

# The table's engines: label -> the prefix of compare.py's row names (end to end and model
# only). Ratios are read against OPTIMUM_INT8 and TRANSFORMERS.
ENGINES = {"bertonnx fp32": NAMES["fp32"], "bertonnx int8": NAMES["int8"],
           "Optimum O2 fp32": "Optimum O2", "Optimum plain fp32": "Optimum plain",
           "Optimum int8": "Optimum int8",
           "torch (bertonnx.build)": "scratch torch", "transformers": "transformers"}
OPTIMUM_INT8, TRANSFORMERS = "Optimum int8", "transformers"


@dataclass(frozen=True)
class FamiliesOptions:
    work: Path = Path(".bench/families")  # checkpoints and exports, reused between runs
    families: tuple[str, ...] = tuple(FAMILIES)
    sources: dict = field(default_factory=dict)  # family -> a real folder (mpnet's: the cache)
    tiny: bool = False     # --quick: tiny random models of every family
    fresh: bool = False    # re-export (checkpoints are kept)
    optimum: bool = True   # include Optimum (when the `bench` extra is installed)
    prepare_only: bool = False  # make checkpoints and exports, time nothing


def say(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def families(options: BenchOptions, setup: FamiliesOptions = FamiliesOptions(),
             say=say) -> dict:
    """Each family's checkpoint, exports and compare() run; the rows of the combined table
    (`setup.prepare_only`: checkpoints and exports only, for a later timed run)."""
    work = setup.work.resolve()
    out = {"machine": machine_info(options.n_threads), "options": asdict(options),
           "families": [], "prepared": [], "skipped": []}
    for family in setup.families:
        source = setup.sources.get(family)
        spec = FAMILIES[family]
        if spec.real is not None and source is None and not setup.tiny:
            source = spec.real()
            if source is None:
                out["skipped"].append({"family": family, "reason": (
                    f"no real {spec.title} folder here: run `python -m tests.real_mpnet` once, "
                    f"or pass {spec.flag} DIR")})
                continue
        say(f"{family}: checkpoint")
        try:
            ckpt = make_checkpoint(family, work / family / "checkpoint",
                                   None if setup.tiny else source, setup.tiny)
            # Optimum's O2 where the family's base model fits this machine (tiny ones all do)
            o2 = FAMILIES[family].optimum_o2 or setup.tiny
            notes, with_optimum = prepare(ckpt, work / family, setup, say, o2)
            if setup.prepare_only:
                out["prepared"].append({"family": family, "checkpoint": str(ckpt.folder),
                                        "notes": notes})
            else:
                out["families"].append(measure(ckpt, work / family, options, notes,
                                               with_optimum, o2))
        except Exception as e:  # noqa: BLE001 — one family's failure leaves the others' figures
            traceback.print_exc()
            first = (str(e).strip().splitlines() or [""])[0][:300]
            out["skipped"].append({"family": family, "reason": f"{type(e).__name__}: {first}",
                                   "error": True})
        gc.collect()  # the last family's sessions and models, before the next loads its own
    return out


def prepare(ckpt: Checkpoint, work: Path, setup: FamiliesOptions, say=say, o2: bool = True
            ) -> tuple[list[str], bool]:
    """bertonnx's and Optimum's artifacts, made (or reused) here so that compare() only reuses
    them: (notes, whether Optimum is in)."""
    notes = []
    model = ckpt.folder.resolve()
    fresh = setup.fresh or ckpt.new  # a new checkpoint at the same path: its exports are stale
    if fresh:
        for d in work.glob("bertonnx-*"):
            shutil.rmtree(d)
    ours(model, work, "none", fresh=False)
    try:
        int8_dir = ours(model, work, "int8", fresh=False)
    except CheckFailed as e:
        notes.append(f"bertonnx int8: the agreement gate refused every recipe ({e.problem}); "
                     "exported without the gate, as `--no-parity` does")
        int8_dir = ours(model, work, "int8", fresh=True, gate=False)
    quant = Manifest.read(int8_dir, verify=False)
    gate = quant.parity.get("agreement")
    notes.append(f"bertonnx int8 recipe {quant.quantization.get('recipe')}" + (
        f", agreement gate {gate:.3f} on its sentences" if gate is not None else ", ungated"))
    with_optimum = setup.optimum and has_optimum()
    if setup.optimum and not with_optimum:
        notes.append("Optimum is not installed (the `bench` extra): left out")
    if with_optimum:
        try:  # a family Optimum cannot export runs without it
            optimum_artifacts(model, work, fresh, say, int8_config=OPTIMUM_CONFIG[
                this_kind()], o2=o2)
            if not o2:
                notes.append(f"Optimum: {FAMILIES[ckpt.family].optimum_o2_note}")
        except Exception as e:  # noqa: BLE001 — any failure of Optimum's is its row's note
            first = (str(e).strip().splitlines() or [""])[0][:300]
            notes.append(f"Optimum could not export this family, left out: "
                         f"{type(e).__name__}: {first}")
            with_optimum = False
    return notes, with_optimum


def measure(ckpt: Checkpoint, work: Path, options: BenchOptions, notes: list[str],
            with_optimum: bool, o2: bool = True) -> dict:
    """compare() on the prepared artifacts, and the family's rows of the combined table."""
    model = ckpt.folder.resolve()
    result = compare(options, CompareOptions(model=str(model), work=work, fresh=False,
                                             optimum=with_optimum, hf_forward=True,
                                             optimum_o2=o2))
    notes = notes + [f"Optimum: {n}" for n in result.machine.get("notes", [])]
    result.targets, result.ratios = {}, {}  # compare.py's bounds are MiniLM's, not these
    spec = FAMILIES[ckpt.family]
    config = json.loads((model / "config.json").read_text())
    return {"family": ckpt.family, "title": spec.title, "weights": ckpt.weights,
            "source": ckpt.source, "tokenizer": ckpt.tokenizer, "checkpoint": str(model),
            "config": {k: config.get(k) for k in ("hidden_size", "num_hidden_layers",
                                                   "num_attention_heads", "intermediate_size",
                                                   "vocab_size")},
            "torch_threads": result.machine.get("torch_threads"),
            "text_set": result.text_set, "notes": notes, "rows": table_rows(result),
            "result": asdict(result)}


def _find(table: dict, prefix: str) -> dict | None:
    return next((row for name, row in table.items() if name.startswith(prefix)), None)


def table_rows(result) -> list[dict]:
    """One row per engine: end-to-end texts/s and model-only ms, each with its speed ratio
    to Optimum int8 and to transformers (> 1: faster), and top-label agreement."""
    def ips(label):
        row = _find(result.end_to_end, ENGINES[label])
        return row["items_per_s"] if row else None

    def ms(label):
        row = _find(result.throughput, ENGINES[label])
        return row["ms"] if row else None

    def ratio(a, b):
        return a / b if a and b else None

    rows = []
    for label, prefix in ENGINES.items():
        e2e = _find(result.end_to_end, prefix)
        if e2e is None and ms(label) is None:
            continue
        rows.append({
            "engine": label, "texts_per_s": ips(label), "model_ms": ms(label),
            "e2e_vs_optimum_int8": ratio(ips(label), ips(OPTIMUM_INT8)),
            "e2e_vs_transformers": ratio(ips(label), ips(TRANSFORMERS)),
            "model_vs_optimum_int8": ratio(ms(OPTIMUM_INT8), ms(label)),
            "model_vs_transformers": ratio(ms(TRANSFORMERS), ms(label)),
            "agreement": (e2e or {}).get("agreement"),
            "e2e_name": next((n for n in result.end_to_end if n.startswith(prefix)), None)})
    return rows


if __name__ == "__main__":  # `python -m bertonnx.bench.families`: its flags live in commands.py
    from bertonnx.runtime.cli.main import run_click

    from .commands import families_command

    sys.exit(run_click(families_command, prog_name="python -m bertonnx.bench.families"))
