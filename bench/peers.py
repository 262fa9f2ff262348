"""The peers bertonnx is measured against on the retrieval tasks, each an `Engine` whose `e2e`
is the peer's own library call on the task's work (with its own batching) and whose `answer`
turns that call's output into what accuracy compares (retrieval.py):

    sentence-transformers  SentenceTransformer / CrossEncoder / SparseEncoder on the backends
                           torch (fp32, and bf16 as its docs load it: model_kwargs
                           {"torch_dtype": torch.bfloat16}), onnx (its export; O3-optimized;
                           int8 by export_dynamic_quantized_onnx_model) and openvino
    CTranslate2            Encoder from its TransformersConverter, float32 and int8 (embeddings:
                           mean pooling + normalize in numpy, as its docs' recipe)
    fastembed              TextEmbedding / TextCrossEncoder / SparseTextEmbedding (SpladePP) on
                           sentence-transformers' ONNX folder, loaded with specific_model_path

Tasks (retrieval.py's `kind`): "embed" (texts -> (N, D) vectors), "rerank" ([(query, documents)]
-> one score per document, document order), "sparse" (texts -> (N, V) weights). Every peer is a
bench-only dependency imported when its engine is made; one that is missing or cannot run here
is a `Skipped` line in the report, never an error. Reference: sbert.net's "Speeding up
Inference" pages (the backends, their export and quantization calls).
"""
from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertonnx.runtime.core.cpu import this_kind

from .engines import Engine, best_torch_threads
from .optimum import OPTIMUM_CONFIG

ST_CLASSES = {"embed": "SentenceTransformer", "rerank": "CrossEncoder", "sparse": "SparseEncoder"}
ST = "sentence-transformers"
FASTEMBED_SPLADE = "prithivida/Splade_PP_en_v1"  # SpladePP's name; its files come from our path


@dataclass(frozen=True)
class Skipped:
    """A peer left out, and why (printed under the table)."""
    name: str
    reason: str


def int8_config() -> str:
    """The quantization config sentence-transformers (Optimum) documents for this CPU."""
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "arm64"
    return OPTIMUM_CONFIG[this_kind()]


def _missing(module: str) -> str | None:
    """None when `module` imports; else the reason, for a Skipped line."""
    try:
        __import__(module)
    except ImportError as e:
        return f"not installed ({e.name or module}): pip install it into the bench environment"
    return None


# -- answers: each peer's output as retrieval.py compares it ------------------------------

def dense_rows(rows) -> np.ndarray:
    """Vectors (numpy or torch, dense or sparse) -> a float32 (N, D) array."""
    if hasattr(rows, "to_dense"):   # a torch sparse tensor (SparseEncoder.encode's default)
        rows = rows.to_dense()
    if hasattr(rows, "numpy"):
        rows = rows.cpu().float().numpy()  # numpy has no bfloat16 (the torch bf16 row)
    return np.asarray(rows, dtype=np.float32)


def rank_scores(ranked_lists: list) -> list[np.ndarray]:
    """CrossEncoder.rank-style results ({"corpus_id", "score"}, sorted) -> scores in document
    order, one array per query."""
    out = []
    for ranked in ranked_lists:
        scores = np.zeros(len(ranked), np.float32)
        for r in ranked:
            scores[r["corpus_id"]] = r["score"]
        out.append(scores)
    return out


def sparse_rows(embeddings: list, vocab: int) -> np.ndarray:
    """fastembed SparseEmbedding(indices, values) per text -> (N, V)."""
    out = np.zeros((len(embeddings), vocab), np.float32)
    for row, e in zip(out, embeddings):
        row[e.indices] = e.values
    return out


# -- sentence-transformers -----------------------------------------------------------------

def st_model(kind: str, folder: Path, backend: str, threads: int, file_name: str | None = None,
             openvino_hint: str | None = None, bf16: bool = False):
    """A sentence-transformers model of the task's class on `backend`, `threads` intra-op;
    `openvino_hint`: OpenVINO's INFERENCE_PRECISION_HINT (None: its default for this CPU);
    `bf16`: the torch backend's weights and arithmetic in torch.bfloat16 (sbert.net's
    "Speeding up Inference": model_kwargs={"torch_dtype": torch.bfloat16})."""
    # bench-only dependency: imported when its engine is made
    import sentence_transformers

    cls = getattr(sentence_transformers, ST_CLASSES[kind])
    kwargs: dict = {}
    if backend == "torch" and bf16:
        import torch  # sentence-transformers' own dependency: only for the dtype

        kwargs = {"torch_dtype": torch.bfloat16}
    elif backend == "onnx":
        import onnxruntime as ort  # its session options: the same thread count as every engine

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        # SPLADE's (B, T, V) logits leave the graph: the arena keeps each session's largest
        # (GBs at batch 32 × 300 tokens), and one process holding every engine reached 18.6 GB;
        # freed after each call instead (sparse only)
        so.enable_cpu_mem_arena = kind != "sparse"
        kwargs = {"provider": "CPUExecutionProvider", "session_options": so}
    elif backend == "openvino":
        kwargs = {"ov_config": {"INFERENCE_NUM_THREADS": threads,
                                **({"INFERENCE_PRECISION_HINT": openvino_hint}
                                   if openvino_hint else {})}}
    if file_name:
        kwargs["file_name"] = file_name
    return cls(str(folder), backend=backend, device="cpu", model_kwargs=kwargs or None)


def st_artifacts(kind: str, source: Path, work: Path, backends: set[str], say
                 ) -> dict[str, Path]:
    """sentence-transformers' own folders of `source` for `backends` (made once, reused):
    onnx/ (model.onnx, model_O3.onnx, model_qint8_<config>.onnx) and openvino/."""
    out = {"onnx": work / f"st-{kind}-onnx", "openvino": work / f"st-{kind}-openvino"}
    if not backends & set(out):
        return out
    # bench-only dependency: imported when its artifacts are made
    from sentence_transformers.backend import (export_dynamic_quantized_onnx_model,
                                               export_optimized_onnx_model)

    if "onnx" in backends and not (out["onnx"] / "onnx" / ST_FILES["st-onnx-int8"]).is_file():
        say(f"{ST} ONNX export of {source.name} ({kind}) -> {out['onnx']}")
        shutil.rmtree(out["onnx"], ignore_errors=True)
        model = st_model(kind, source, "onnx", 2)
        model.save_pretrained(str(out["onnx"]))
        export_optimized_onnx_model(model, "O3", str(out["onnx"]))
        export_dynamic_quantized_onnx_model(model, int8_config(), str(out["onnx"]))
    if "openvino" in backends and not (out["openvino"] / "openvino").is_dir():
        say(f"{ST} OpenVINO export of {source.name} ({kind}) -> {out['openvino']}")
        st_model(kind, source, "openvino", 2).save_pretrained(str(out["openvino"]))
    return out


def st_call(kind: str, model):
    """The library call a user makes, and its answer converter."""
    if kind == "rerank":
        return (lambda work: [model.rank(q, list(docs)) for q, docs in work]), rank_scores
    return (lambda work: model.encode(work)), dense_rows


# peer key -> (row label, backend, file inside the backend's folder, precision)
ST_VARIANTS = {
    "st-torch": ("torch", "torch", None, "fp32"),
    "st-torch-bf16": ("torch bf16", "torch", None, "bf16"),
    "st-onnx": ("onnx", "onnx", "model.onnx", "fp32"),
    "st-onnx-o3": ("onnx O3", "onnx", "model_O3.onnx", "fp32"),
    "st-onnx-int8": (f"onnx int8 ({int8_config()})", "onnx", f"model_qint8_{int8_config()}.onnx",
                     "int8"),
    "st-openvino": ("openvino", "openvino", None, "openvino"),
    # what OpenVINO runs on a CPU without bf16 instructions (Zen 3, older Xeons), here
    "st-openvino-f32": ("openvino f32", "openvino", None, "fp32"),
}
OPENVINO_HINTS = {"st-openvino-f32": "f32"}
ST_FILES = {k: v[2] for k, v in ST_VARIANTS.items()}
# what each backend needs beside sentence-transformers, and so each variant
BACKEND_NEEDS = {"torch": None, "onnx": "optimum.onnxruntime", "openvino": "optimum.intel"}
NEEDS = {k: BACKEND_NEEDS[v[1]] for k, v in ST_VARIANTS.items()}


def st_engines(kind: str, source: Path, work: Path, threads: int, keys, say
               ) -> tuple[list[Engine], list[Skipped]]:
    """The sentence-transformers rows among `keys` (ST_VARIANTS), each on its own folder."""
    keys = [k for k in ST_VARIANTS if k in keys]
    if keys and (why := _missing("sentence_transformers")):
        return [], [Skipped(ST, why)]
    skipped, ready = [], []
    for key in keys:
        if NEEDS[key] and (why := _missing(NEEDS[key])):
            hint = (' (pip install "optimum-intel[openvino]")' if NEEDS[key] == "optimum.intel"
                    else "")
            skipped.append(Skipped(f"{ST} {ST_VARIANTS[key][0]}", why + hint))
        else:
            ready.append(key)
    folders = st_artifacts(kind, source, work, {ST_VARIANTS[k][1] for k in ready}, say)
    engines = []
    for key in ready:
        label, backend, file_name, precision = ST_VARIANTS[key]
        folder = source if backend == "torch" else folders[backend]
        model = st_model(kind, folder, backend, threads,
                         f"onnx/{file_name}" if backend == "onnx" else None,
                         OPENVINO_HINTS.get(key), bf16=precision == "bf16")
        facts = {}
        if backend == "torch":
            auto = model[0].auto_model
            n = best_torch_threads(auto, threads, auto.config.vocab_size)
            facts = {"torch_threads": f"torch threads {n}"}
        elif backend == "openvino":
            runs = openvino_precision(model.transformers_model)
            precision = (f"{runs} (hint {OPENVINO_HINTS[key]})" if key in OPENVINO_HINTS
                         else f"{runs} (OpenVINO's default here)")
        call, answer = st_call(kind, model)
        engines.append(Engine(f"{ST} {label}", e2e=call, answer=answer, precision=precision,
                              facts=facts))
    if "st-openvino" in keys:
        skipped.append(Skipped(f"{ST} openvino int8", "export_static_quantized_openvino_model "
                               "calibrates on a hub dataset (GLUE SST-2 through `datasets`): "
                               "not reachable offline"))
    return engines, skipped


def openvino_precision(model) -> str:
    """The precision OpenVINO's CPU plugin runs an Optimum Intel model at (its
    INFERENCE_PRECISION_HINT: bf16 by default where the CPU has bf16 instructions, else f32)."""
    try:
        request = model.request
        compiled = getattr(request, "get_compiled_model", lambda: request)()
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")  # an openvino Type
        return getattr(hint, "get_type_name", lambda: str(hint))()
    except Exception:  # the figure is informative: any API change leaves "?", not a failure
        return "?"


# -- CTranslate2 (embeddings) --------------------------------------------------------------

def ct2_model(source: Path, work: Path, quant: str, say) -> Path:
    """CTranslate2's conversion of `source` at `quant` (float32, int8), made once."""
    from ctranslate2.converters import TransformersConverter  # bench-only dependency

    out = work / f"ct2-embed-{quant}"
    if not (out / "model.bin").is_file():
        say(f"CTranslate2 conversion ({quant}) -> {out}")
        TransformersConverter(str(source)).convert(str(out), quantization=quant, force=True)
    return out


def ctranslate2_engines(source: Path, work: Path, threads: int, say
                        ) -> tuple[list[Engine], list[Skipped]]:
    """CTranslate2 float32 and int8 of an embedding folder with mean pooling (+ Normalize)."""
    if (why := _missing("ctranslate2")):
        return [], [Skipped("CTranslate2", why)]
    # bench-only dependencies: imported when their engine is made
    import ctranslate2
    from tokenizers import Tokenizer

    pooling = json.loads((source / "1_Pooling" / "config.json").read_text())
    if not (pooling.get("pooling_mode_mean_tokens") or pooling.get("pooling_mode") == "mean"):
        return [], [Skipped("CTranslate2", "its row implements mean pooling only")]
    normalize = "Normalize" in (source / "modules.json").read_text()
    max_len = json.loads((source / "sentence_bert_config.json").read_text())["max_seq_length"]
    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.no_padding()   # the folder's tokenizer.json pads to 128: CTranslate2 pads itself
    tok.enable_truncation(max_len)
    engines = []
    for quant, precision in (("float32", "fp32"), ("int8", "int8")):
        try:
            converted = ct2_model(source, work, quant, say)
        except ValueError as e:  # a family it has no converter for (MPNet: all-mpnet-base-v2)
            return [], [Skipped("CTranslate2", str(e).split(" (supported")[0])]
        encoder = ctranslate2.Encoder(str(converted), device="cpu", intra_threads=threads)

        def call(texts, encoder=encoder):
            ids = [e.ids for e in tok.encode_batch(texts)]
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # as ST sorts by length
            out = np.empty((len(ids), 0), np.float32)
            for start in range(0, len(order), 32):                   # ST's default batch size
                rows = order[start:start + 32]
                hidden = np.asarray(encoder.forward_batch([ids[i] for i in rows])
                                    .last_hidden_state)              # (B, T, H), padded
                lens = np.array([len(ids[i]) for i in rows])
                mask = np.arange(hidden.shape[1])[None, :] < lens[:, None]
                vec = (hidden * mask[..., None]).sum(1) / lens[:, None]
                if normalize:
                    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
                if out.shape[1] == 0:
                    out = np.empty((len(ids), vec.shape[1]), np.float32)
                out[rows] = vec
            return out

        engines.append(Engine(f"CTranslate2 {quant}", e2e=call, precision=precision,
                              answer=dense_rows))
    return engines, []


# -- fastembed -----------------------------------------------------------------------------

def fastembed_engines(kind: str, st_onnx: Path, threads: int, dim: int, vocab: int
                      ) -> tuple[list[Engine], list[Skipped]]:
    """fastembed on sentence-transformers' fp32 ONNX folder, from disk (specific_model_path:
    nothing is downloaded). Its SPLADE class has no custom-model registry in 0.9: the folder is
    loaded under SpladePP's registered name, whose post-processing is SpladePooling's (max of
    log1p(relu(logits)) over unmasked tokens)."""
    if (why := _missing("fastembed")):
        return [], [Skipped("fastembed", why)]
    # bench-only dependency: imported when its engine is made
    from fastembed import SparseTextEmbedding, TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType
    from fastembed.rerank.cross_encoder import TextCrossEncoder

    name = f"bertonnx-bench/{st_onnx.name}"
    source = ModelSource(hf=name)  # never fetched: specific_model_path wins
    if kind == "embed":
        if name.lower() not in {m.model.lower() for m in TextEmbedding._list_supported_models()}:
            TextEmbedding.add_custom_model(name, PoolingType.MEAN, True, source, dim)
        model = TextEmbedding(name, threads=threads, specific_model_path=str(st_onnx))
        call, answer = (lambda texts: list(model.embed(texts))), dense_rows
    elif kind == "rerank":
        known = {m.model.lower() for m in TextCrossEncoder._list_supported_models()}
        if name.lower() not in known:
            TextCrossEncoder.add_custom_model(name, source)
        model = TextCrossEncoder(name, threads=threads, specific_model_path=str(st_onnx))
        call = lambda work: [list(model.rerank(q, list(docs))) for q, docs in work]
        answer = lambda out: [np.asarray(s, np.float32) for s in out]  # logits, no activation
    else:
        flat = st_onnx.parent / f"{st_onnx.name}-fastembed"  # SpladePP reads model.onnx at top
        if not (flat / "model.onnx").is_file():
            flat.mkdir(parents=True, exist_ok=True)
            for f in st_onnx.iterdir():
                if f.is_file():
                    shutil.copy(f, flat / f.name)
            shutil.copy(st_onnx / "onnx" / "model.onnx", flat / "model.onnx")
        model = SparseTextEmbedding(FASTEMBED_SPLADE, threads=threads,  # arena: see st_model
                                    specific_model_path=str(flat), enable_cpu_mem_arena=False)
        # its default batch of 256 texts holds 256 × T × V float logits at once (9 GB for
        # 256 passages of 300 tokens: the benchmark was killed for memory): sentence-
        # transformers' 32 instead
        call, answer = (lambda texts: list(model.embed(texts, batch_size=32))), (
            lambda out: sparse_rows(out, vocab))
    return [Engine("fastembed (onnx fp32)", e2e=call, answer=answer, precision="fp32")], []
