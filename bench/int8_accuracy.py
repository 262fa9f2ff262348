"""int8 embeddings against fp32 and CTranslate2's int8 on held-out prose: accuracy and speed of
each recipe of export/int8/recipes.py, side by side in one process (docs/int8.md, "Accuracy
against CTranslate2").

    python -m bertonnx.bench.int8_accuracy SENTENCE_TRANSFORMERS_FOLDER --work .bench/i8acc \\
        [--recipes s8,s8-smooth-qkv] [--threads 1,2] [--rounds 5]

Accuracy: texts in, normalized mean-pooled vectors out (bertonnx's pipeline; CTranslate2's
encoder with the same pooling, bench/peers.py), cosine of each text's vector to our fp32
export's (itself within 1e-5 of torch fp32: the export's parity) on prose_sentences(512) and
prose_passages(128) (bench/inputs.py: the stdlib's reference prose). The recipes calibrate
(SmoothQuant) on export/texts.py's sentences, so this text is held out. Speed: model only at
batch 32 × 64 tokens (random ids) and end to end on the 512 sentences, every engine in one
round-robin loop per thread count (medians): the machine may be shared, so only the ratios
between rows of one run mean anything.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from bertonnx.export import ExportOptions, export_model

from .engines import onnx_engine
from .inputs import prose_passages, prose_sentences, random_feeds
from .peers import ctranslate2_engines, dense_rows
from .timing import round_robin, stats

TASK = "feature-extraction"


def say(msg: str) -> None:
    print(f"int8_accuracy: {msg}", file=sys.stderr, flush=True)


def exports(source: Path, work: Path, recipes: list[str]) -> dict[str, Path]:
    """Our fp32 export and one int8 export per recipe (reused when present)."""
    out = {}
    for name in ["fp32", *recipes]:
        folder = work / f"{source.name}-{name}"
        if not (folder / "bertonnx.json").is_file():
            say(f"export {name}")
            opts = (ExportOptions(force=True, parity=False) if name == "fp32" else
                    ExportOptions(quantize="int8", int8_recipe=name, force=True, parity=False))
            export_model(source, TASK, folder, opts)
        out[name] = folder
    return out


def cosines(got, ref) -> tuple[float, float]:
    a, b = dense_rows(got).astype(np.float64), dense_rows(ref).astype(np.float64)
    c = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(c.mean()), float(c.min())


def study(source: Path, work: Path, recipes: list[str], threads: list[int], rounds: int,
          ct2: bool = True) -> list[str]:
    work.mkdir(parents=True, exist_ok=True)
    folders = exports(source, work, recipes)
    texts = {"sentences": prose_sentences(512), "passages": prose_passages(128)}
    lines = [f"{source.name}: cosine to fp32 (mean / worst) and speed, {rounds} rounds"]
    for n in threads:
        engines = {name: onnx_engine(f"bertonnx {name}", f, n) for name, f in folders.items()}
        peers = ctranslate2_engines(source, work, n, say)[0] if ct2 else []
        e2e = {name: e.e2e for name, e in engines.items()}
        e2e.update({e.name: e.e2e for e in peers if e.precision == "int8"})
        if n == threads[0]:
            refs = {k: e2e["fp32"](v) for k, v in texts.items()}
            for name, call in e2e.items():
                if name != "fp32":
                    figs = [cosines(call(v), refs[k]) for k, v in texts.items()]
                    lines.append(f"  accuracy {name:<34} " + "  ".join(
                        f"{k} {m:.4f} / {w:.4f}" for k, (m, w) in zip(texts, figs)))
        feeds = random_feeds(32, 64, json.loads((folders["fp32"] / "config.json").read_text())
                             ["vocab_size"], seed=1)
        say(f"{n} thread(s): model only b32 s64")
        mo = round_robin({name: (lambda e=e: e.forward(feeds)) for name, e in engines.items()},
                         rounds, 1)
        say(f"{n} thread(s): end to end, {len(texts['sentences'])} sentences")
        ee = round_robin({name: (lambda c=c: c(texts["sentences"])) for name, c in e2e.items()},
                         rounds, 1)
        base = stats(mo["s8"])["median"] if "s8" in mo else None
        ebase = stats(ee["s8"])["median"] if "s8" in ee else None
        for name in ee:
            e = stats(ee[name])["median"]
            m = stats(mo[name])["median"] if name in mo else None
            row = f"  {n}t {name:<34} "
            row += (f"b32s64 {m * 1000:7.1f} ms" if m else " " * 16)
            row += f" ({m / base:4.2f}× s8)  " if m and base else "  "
            row += f"e2e {len(texts['sentences']) / e:6.1f} texts/s"
            row += f" ({e / ebase:4.2f}× s8 time)" if ebase else ""
            lines.append(row)
    return lines


def main(argv=None) -> int:
    # argparse, not click: a study run as `python -m`, not a bertonnx command
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.int8_accuracy")
    ap.add_argument("source", type=Path, help="a sentence-transformers folder (mean pooling)")
    ap.add_argument("--work", type=Path, default=Path(".bench/int8-accuracy"))
    ap.add_argument("--recipes", default="s8,s8-smooth,s8-smooth-qkv")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-ct2", action="store_true", help="leave CTranslate2 out")
    a = ap.parse_args(argv)
    lines = study(a.source, a.work, a.recipes.split(","),
                  [int(t) for t in a.threads.split(",")], a.rounds, not a.no_ct2)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
