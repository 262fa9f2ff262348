"""Static int8 on OpenVINO (issue 41, item 3): NNCF's post-training quantization of bertonnx's
fused fp32 graph, run by OpenVINO, against OpenVINO bf16 on the same graph and onnxruntime's
int8 export, model only, one process (docs/engines.md, "Static int8 on OpenVINO").

    python -m bertonnx.bench.openvino_int8 FP32_EXPORT INT8_EXPORT [--calibration N]
        [--rounds 7] [--threads 2] [--e2e-rounds 3]

FP32_EXPORT and INT8_EXPORT: an embedding model's `bertonnx export` folders (fp32, and int8 by
this CPU's recipe). NNCF reads the fp32 graph as OpenVINO reads it (its com.microsoft ops
decomposed into OpenVINO's) and quantizes it with the transformer preset (SmoothQuant, int8
MatMuls with fp32 outliers kept) — once as it is and once as an int8 export writes it
(export/openvino_int8.py: its MatMuls kept fp32) — calibrated on the export's own calibration
text (WordNet's sentences and their joined passages), or with `--calibration N` on N prose
sentences that appear in neither held-out set (`disjoint_calibration`). Accuracy: each held-out
text's mean-pooled, normalized vector against onnxruntime fp32's on the same graph
(prose_sentences(512), prose_passages(128): bench.int8_accuracy's held-out prose). Speed: batch
32 × 128 random ids, the engines interleaved and rotated each round (medians): only ratios
within a run mean anything. Needs `nncf` and `openvino` (`bertonnx[nncf]`).

Then end to end, as users run it: texts in, answers out, through bertonnx's own pipeline of the
export (tokenizing, length-sorted micro-batches at each engine's batch width, pooling), one
stream each, round-robin (`--e2e-rounds`, medians), on two text sets — the held-out sentences
and passages (mostly short), and 256 prose passages of 20-200 words (the documents a ColBERT or
BGE-M3 index encodes) — the NNCF graph at both precision hints beside the int8 export and
OpenVINO bf16. Model-only shapes overstate the NNCF graph's lead on real text (docs/engines.md).
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

from bertonnx.runtime import load
from bertonnx.runtime.core import engines, openvino_engine, openvino_runtime
from bertonnx.runtime.core.pipelines import PIPELINES, ExportFolder
from bertonnx.runtime.core.session import Session, SessionConfig, create_session
from bertonnx.runtime.core.tokenizer import load_tokenizer

from bertonnx.export.openvino_int8 import calibration_texts, quantize

from .grid import mean_pooled
from .inputs import prose_passages, prose_sentences, random_feeds
from .timing import round_robin

BATCH, SEQ = 32, 128


def disjoint_calibration(held: dict[str, list[str]], n: int) -> list[str]:
    """`n` prose sentences, spread over the prose, none of them a held-out sentence nor inside a
    held-out passage (the calibration must not see what accuracy is judged on)."""
    seen = set(held.get("sentences", ()))
    passages = held.get("passages", ())
    pool = [s for s in dict.fromkeys(prose_sentences(100_000))
            if s not in seen and not any(s in p for p in passages)]
    if len(pool) < n:
        raise SystemExit(f"only {len(pool)} prose sentences are held out of the accuracy sets; "
                         f"ask for --calibration {len(pool)} or fewer")
    return pool[:: max(1, len(pool) // n)][:n]


def main(argv=None) -> int:
    # argparse, not click: a study run as `python -m`, not a bertonnx command
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.openvino_int8")
    ap.add_argument("fp32", type=Path)
    ap.add_argument("int8", type=Path)
    ap.add_argument("--calibration", type=int, default=0,
                    help="calibrate on this many held-out prose sentences instead of the "
                         "export's own calibration text (0)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--e2e-rounds", type=int, default=3)
    args = ap.parse_args(argv)
    try:  # bench-only libraries: one line when absent
        import nncf
        import openvino as ov
    except ImportError as e:
        raise SystemExit(f"needs {e.name}: pip install nncf openvino") from None
    nncf.set_log_level(logging.ERROR)   # its INFO lines name every MatMul it leaves alone

    tok = load_tokenizer(args.fp32).backend
    tok.enable_padding()          # a batch as one rectangle: this bench feeds graphs directly
    tok.enable_truncation(512)
    held = {"sentences": prose_sentences(512), "passages": prose_passages(128)}
    calibration = (disjoint_calibration(held, args.calibration) if args.calibration
                   else calibration_texts())
    core = ov.Core()
    model = core.read_model(str(args.fp32 / "model.onnx"))
    names = {i.get_any_name() for i in model.inputs}

    def batch(texts):
        enc = tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc], np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in enc],
                                                               np.int64),
                 "token_type_ids": np.zeros_like(ids)}
        return {k: v for k, v in feeds.items() if k in names}

    feeds = [batch(calibration[i:i + 8]) for i in range(0, len(calibration), 8)]
    quantized = nncf.quantize(model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(calibration))
    # what an int8 export writes: export/openvino_int8.py's recipe (its MatMuls left fp32,
    # its SmoothQuant alpha)
    shipped = quantize(model, feeds)
    runs = {}
    for label, folder in (("onnxruntime fp32", args.fp32), ("onnxruntime int8 export", args.int8)):
        s = create_session(folder / "model.onnx", providers="cpu", threads=args.threads)
        runs[label] = lambda f, s=s: s.run(f)[s.output_names[0]]
    for label, graph, hint in (("OpenVINO bf16, fp32 graph", model, "bf16"),
                               ("OpenVINO, NNCF int8 graph, f32 hint", quantized, "f32"),
                               ("OpenVINO, NNCF int8 graph, bf16 hint", quantized, "bf16"),
                               ("OpenVINO, the shipped recipe, f32 hint", shipped, "f32"),
                               ("OpenVINO, the shipped recipe, bf16 hint", shipped, "bf16")):
        compiled = core.compile_model(graph, "CPU",
                                      openvino_engine.openvino_config(hint, args.threads))
        request = compiled.create_infer_request()
        runs[label] = lambda f, r=request, o=compiled.outputs[0]: r.infer(f)[o].copy()

    accuracy = {label: [] for label in runs}
    for texts in held.values():
        batches = [batch(texts[i:i + 32]) for i in range(0, len(texts), 32)]
        ref = np.concatenate([mean_pooled(runs["onnxruntime fp32"](b), b["attention_mask"])
                              for b in batches])
        for label, run in runs.items():
            got = np.concatenate([mean_pooled(run(b), b["attention_mask"]) for b in batches])
            cos = (got * ref).sum(1)
            accuracy[label].append(f"{cos.mean():.4f} / {cos.min():.4f}")
    fixed = {k: v for k, v in random_feeds(BATCH, SEQ, tok.get_vocab_size()).items()
             if k in names}
    times = round_robin({k: (lambda run=run: run(fixed)) for k, run in runs.items()},
                        args.rounds, warmup=1, rotate=True)
    base = float(np.median(times["onnxruntime int8 export"]))
    print(f"calibration: {len(calibration)} " + ("held-out prose sentences" if args.calibration
                                                  else "texts, the export's own") +
          f"; batch {BATCH} x {SEQ}, "
          f"{args.threads} threads, median of {args.rounds}")
    print("| graph, engine | ms per batch | × onnxruntime int8 | cosine to fp32, sentences "
          "(mean / worst) | passages |")
    print("|---|---|---|---|---|")
    for label in runs:
        ms = float(np.median(times[label]))
        print(f"| {label} | {1000 * ms:.1f} | {base / ms:.2f} | {accuracy[label][0]} | "
              f"{accuracy[label][1]} |")
    end_to_end(args, {"as NNCF writes it": quantized, "the shipped recipe": shipped})
    return 0


def end_to_end(args, graphs: dict) -> None:
    """Texts per second through the export's own pipeline on each engine (module docstring)."""
    import tempfile

    import openvino as ov   # bench-only, as in main

    # each run of a set would say again that its longest passages were truncated (alike for all)
    logging.getLogger("bertonnx").setLevel(logging.ERROR)
    folder = ExportFolder.read(args.fp32)
    pipes = {"onnxruntime int8 export": load(args.int8, providers="cpu", threads=args.threads),
             "OpenVINO bf16, fp32 graph": load(args.fp32, providers="openvino:bf16",
                                               threads=args.threads)}
    int8_row = engines.Choice("openvino", "int8")   # the shipped int8 graph's batches
    with tempfile.TemporaryDirectory(prefix="bertonnx-nncf-") as tmp:
        for name, graph in graphs.items():
            xml = Path(tmp) / f"{len(pipes)}.xml"
            ov.save_model(graph, str(xml), compress_to_fp16=False)
            for hint in ("f32", "bf16"):
                # the NNCF graph is an OpenVINO IR, which only OpenVINO's own runtime reads
                compiled = openvino_runtime.compile_model(
                    xml, openvino_engine.openvino_config(hint, args.threads))
                config = SessionConfig(engine="openvino", precision=hint, threads=args.threads,
                                       batch_tokens=int8_row.batch_tokens,
                                       pad_multiple=int8_row.pad_multiple)
                pipes[f"OpenVINO {hint} hint, NNCF int8 ({name})"] = PIPELINES[
                    folder.manifest.task](folder, Session(compiled, config))
    sets = {"sentences and passages": prose_sentences(512) + prose_passages(128),
            "documents": prose_passages(256)}
    fns = {(label, s): (lambda p=p, t=texts: p(t, batch_size=32))
           for label, p in pipes.items() for s, texts in sets.items()}
    times = round_robin(fns, args.e2e_rounds, warmup=1, rotate=True)
    print(f"\nend to end, texts/s, median of {args.e2e_rounds}, one stream each")
    print("| engine, graph | " + " | ".join(sets) + " |")
    print("|---|" + "---|" * len(sets))
    for label in pipes:
        print(f"| {label} | " + " | ".join(
            f"{len(texts) / float(np.median(times[(label, s)])):.1f}"
            for s, texts in sets.items()) + " |")


if __name__ == "__main__":
    sys.exit(main())
