"""Embeddings on an NVIDIA GPU: bertonnx's fp16 export on onnxruntime's CUDA and TensorRT providers
against sentence-transformers (torch, fp32 and fp16) on the same GPU, end to end.

    python -m bertonnx.bench.gpu MODEL_DIR [--reference ref.npy] [--providers cuda,tensorrt]
                                 [--batches 32,128] [--rounds 3] [--json gpu.json]

Run on a machine with an NVIDIA GPU, onnxruntime-gpu (its CUDA 13 build matches torch's cu130
wheels), torch with CUDA and sentence-transformers. MODEL_DIR is a sentence-transformers folder
(all-MiniLM-L6-v2 in docs/gpu.md). The texts are 2,000 real prose texts of mixed length
(bench/inputs.py: 1,300 sentences of 4-60 words and 700 passages of 20-200 words, shuffled), or
one text per line from `--texts`.

Each engine encodes all the texts (texts in, normalized vectors out, numpy on the host) at each
batch size: two warm-up passes, then `--rounds` timed passes, the median reported as texts/s
(torch.cuda.synchronize around sentence-transformers' passes; bertonnx's answers are on the host
when its call returns). sentence-transformers runs `model.half()` for fp16. bertonnx runs the
folder exported here with `bertonnx export MODEL_DIR --task feature-extraction --quantize fp16`,
loaded with `load(DIR, providers=..., batch_size=...)`; a provider whose session falls back to
another (onnxruntime retries on the CPU when a provider's libraries are missing) is reported as
not run, never timed on the CPU.

Accuracy: the cosine of each engine's vectors to `--reference` (fp32 vectors of the same texts,
e.g. sentence-transformers fp32 on the CPU from the original checkpoint: `--save-reference FILE`
writes them), and to sentence-transformers fp32 on the same GPU.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from random import Random

import numpy as np

EXPECTED = {"cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def gpu_texts() -> list[str]:
    """The 2,000 prose texts the GPU figures were measured on (deterministic)."""
    # inputs only when texts are made: the GPU script runs without the rest of bench
    from .inputs import prose_passages, prose_sentences
    texts = prose_sentences(1300) + prose_passages(700)
    Random(0).shuffle(texts)
    return [" ".join(t.split()) for t in texts]


def cosines(a: np.ndarray, b: np.ndarray) -> dict:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    c = np.sum(a * b, axis=1)
    return {"mean": float(c.mean()), "worst": float(c.min())}


def timed(fn, rounds: int, sync=None):
    """Two warm-up passes, then `rounds` timed ones: (median seconds, all seconds, last output)."""
    fn()
    fn()
    times, out = [], None
    for _ in range(rounds):
        if sync:
            sync()
        start = time.perf_counter()
        out = fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times, out


def environment() -> dict:
    env = {"python": platform.python_version()}
    try:
        env["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        env["gpu"] = f"nvidia-smi failed: {e}"
    for name in ("torch", "sentence_transformers", "transformers", "onnxruntime", "tokenizers"):
        try:
            env[name] = __import__(name).__version__
        except ImportError as e:
            env[name] = f"missing ({e})"
    try:
        # onnxruntime (and its CUDA libraries) only on the machine that times it
        import onnxruntime
        env["onnxruntime_providers"] = onnxruntime.get_available_providers()
    except ImportError:
        pass
    return env


def sentence_transformers_rows(model_dir, texts, batches, rounds, reference, vectors) -> list:
    # torch and sentence-transformers: the reference, imported only where it runs
    import torch
    from sentence_transformers import SentenceTransformer
    rows = []
    for precision in ("fp32", "fp16"):
        model = SentenceTransformer(str(model_dir), device="cuda")
        model = model.half() if precision == "fp16" else model.float()
        for batch in batches:
            def encode():
                return model.encode(texts, batch_size=batch, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
            median, times, out = timed(encode, rounds, torch.cuda.synchronize)
            vectors[f"sentence-transformers {precision}"] = out.astype(np.float32)
            rows.append(row(f"sentence-transformers torch {precision}", batch, texts, median,
                            times, out, reference))
        del model
        torch.cuda.empty_cache()
    return rows


def export_fp16(model_dir: Path, out: Path) -> None:
    command = [sys.executable, "-m", "bertonnx.runtime.cli", "export", str(model_dir), "--task",
               "feature-extraction", "--quantize", "fp16", "--out", str(out), "--force"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    print(" ".join(command[2:]), f"(exit {done.returncode}, {time.perf_counter() - start:.1f} s)")
    print((done.stdout + done.stderr)[-2000:])
    if done.returncode:
        raise SystemExit("bertonnx export --quantize fp16 failed")


def bertonnx_rows(folder, providers, texts, batches, rounds, reference, vectors, errors) -> list:
    import torch  # noqa: F401  (its CUDA libraries, loaded first, are the ones onnxruntime finds)
    import onnxruntime
    if hasattr(onnxruntime, "preload_dlls"):
        onnxruntime.preload_dlls()
    # the runtime after preload_dlls: its session must find the CUDA libraries loaded
    from bertonnx.runtime import load
    rows = []
    for provider in providers:
        for batch in batches:
            try:
                pipe = load(folder, providers=provider, batch_size=batch)
                used = pipe.session.providers
                if provider in EXPECTED and used[0] != EXPECTED[provider]:
                    raise RuntimeError(f"asked for {provider}, the session runs on {used}")

                def encode():
                    return np.asarray(pipe(texts, return_tensors=True), dtype=np.float32)
                median, times, out = timed(encode, rounds)
                vectors[f"bertonnx fp16 {provider}"] = out
                rows.append(row(f"bertonnx fp16 export, onnxruntime {provider}", batch, texts,
                                median, times, out, reference))
            except Exception as e:  # noqa: BLE001  (a provider that cannot run is a finding)
                errors[provider] = f"{type(e).__name__}: {e}"[:1000]
                print(f"not run: {provider}: {errors[provider]}")
                break
    return rows


def row(engine, batch, texts, median, times, out, reference) -> dict:
    r = {"engine": engine, "batch": batch, "texts_per_s": len(texts) / median, "rounds_s": times}
    if reference is not None:
        r["cosine_to_reference"] = cosines(np.asarray(out, dtype=np.float32), reference)
    print(json.dumps(r), flush=True)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="a sentence-transformers folder")
    ap.add_argument("--texts", type=Path, help="one text per line (default: gpu_texts())")
    ap.add_argument("--reference", type=Path, help="fp32 vectors of the texts (.npy)")
    ap.add_argument("--save-reference", type=Path,
                    help="write sentence-transformers fp32 vectors (CPU) of the texts and stop")
    ap.add_argument("--providers", default="cuda,tensorrt")
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--export", type=Path, default=Path("gpu-fp16-export"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    texts = (args.texts.read_text(encoding="utf-8").splitlines() if args.texts else gpu_texts())
    texts = [t for t in texts if t.strip()]
    if args.save_reference:
        # the reference's vectors, made where torch is (the machine that saves them)
        from sentence_transformers import SentenceTransformer
        model = SentenceTransformer(str(args.model), device="cpu")
        np.save(args.save_reference, model.encode(texts, batch_size=64, normalize_embeddings=True,
                                                  convert_to_numpy=True).astype(np.float32))
        return 0
    batches = [int(b) for b in args.batches.split(",")]
    reference = np.load(args.reference).astype(np.float32) if args.reference else None
    env = environment()
    print(json.dumps(env, indent=1))
    vectors, errors = {}, {}
    rows = sentence_transformers_rows(args.model, texts, batches, args.rounds, reference, vectors)
    if not (args.export / "bertonnx.json").exists():
        export_fp16(args.model, args.export)
    rows += bertonnx_rows(args.export, [p for p in args.providers.split(",") if p], texts,
                          batches, args.rounds, reference, vectors, errors)
    same_gpu = {k: cosines(v, vectors["sentence-transformers fp32"]) for k, v in vectors.items()
                if k != "sentence-transformers fp32"}
    print(f"\n{len(texts)} texts, {env['gpu']}")
    print(f"{'engine':48s} {'batch':>5s} {'texts/s':>8s}  cosine to reference (mean / worst)")
    for r in rows:
        c = r.get("cosine_to_reference")
        print(f"{r['engine']:48s} {r['batch']:5d} {r['texts_per_s']:8.0f}  "
              + (f"{c['mean']:.6f} / {c['worst']:.6f}" if c else "-"))
    for k, c in same_gpu.items():
        print(f"  {k} to sentence-transformers fp32 (same GPU): {c['mean']:.6f} / {c['worst']:.6f}")
    for k, e in errors.items():
        print(f"  not run: {k}: {e[:300]}")
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "texts": len(texts), "rows": rows,
                                         "same_gpu": same_gpu, "not_run": errors}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
