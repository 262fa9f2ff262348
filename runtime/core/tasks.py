"""Each task, declared once: one `Task` record per task, read by everything else.

A record holds the task's name and aliases, the head the build side puts on the encoder and
the transformers class it maps to, the graph's outputs and their axes, the pipeline class, how
its inputs are read, and every user parameter (`Param`: type and limits, default, help, and
where the command line or the server differ). From it come the pipeline call's defaults and
checks (pipelines/base.py), the CLI command and its options (runtime/cli), the bulk job's flags
(runtime/bulk), the server's accepted request parameters and /v2 parameters (runtime/server),
the export's outputs and dynamic axes (export/graph.py via contract.py), the build side's
head and loss average (build/heads.py, losses.py), int8's agreement measure
(export/agreement.py), bulk's vector column and bench's sample inputs. References: optimum's
per-task output table (`TasksManager`), TEI's typed request structs
(router/src/http/types.rs).

Adding a task is adding a record here, its pipeline module under pipelines/, and its tests.
The record types (Task, Param, Flag) are in records.py.
"""
from __future__ import annotations

from importlib import import_module
from types import MappingProxyType
from typing import Mapping

from .errors import ConfigError, InputError
# the record types, re-exported: the table's readers import them from here
from .records import BATCH_SIZE, LEGACY, SAME, Flag, Param, Task  # noqa: F401
from .parameters import (MAX_TOP_K, Rule, boolean, choice, integer, joined, strings,
                         template, text, top_k_or_all)

BATCH, SEQUENCE = "batch", "sequence"
# The options of the parameters below (postprocess.py implements each)
FUNCTIONS = ("default", "sigmoid", "softmax", "none")             # text-classification
AGGREGATIONS = ("none", "simple", "first", "average", "max")      # token-classification
# feature-extraction: sentence-transformers' Pooling modes, alone or joined by "+"; or "none"
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
ACTIVATIONS = ("sigmoid", "identity", "tanh")                     # text-ranking
LONG_INPUTS = ("truncate", "chunk")                               # feature-extraction
_BS = MappingProxyType({0: BATCH, 1: SEQUENCE})
_B = MappingProxyType({0: BATCH})

def _words(value: str) -> list[str]:
    """fill-mask's --targets: comma-separated words (none at all is refused: it would score
    nothing, and leaving the option out scores the whole vocabulary)."""
    words = [t.strip() for t in value.split(",") if t.strip()]
    if not words:
        raise InputError(f"--targets must name at least one word, got {value!r}",
                         "pass comma-separated words, e.g. --targets cat,dog, or leave it out "
                         "to score the whole vocabulary")
    return words


def _labels(value: str) -> list[str]:
    """tokens' --ignore-labels: comma-separated labels ('' ignores none)."""
    return [x for x in value.split(",") if x]


def _text(text: str, mask_token: str) -> str:
    """An input that is the text itself."""
    return text


def _masked(text: str, mask_token: str) -> str:
    """fill-mask's input: the text with its middle word masked."""
    words = text.split()
    words[len(words) // 2] = mask_token
    return " ".join(words)


def _question(text: str, mask_token: str) -> dict:
    """question-answering's input: the text as the context, its first six words the question."""
    return {"question": " ".join(text.split()[:6]) + "?", "context": text}


def _ranked(text: str, mask_token: str) -> dict:
    """text-ranking's input: the text as the one document, its first six words the query."""
    return {"query": " ".join(text.split()[:6]), "documents": [text]}


# sentence-transformers' encode(prompt_name=, prompt=) (CrossEncoder's predict and rank: on the
# query), put before each text; the prompt names are the model folder's
# (pipelines/sentence_folder.py)
PROMPT_PARAMS = (
    Param("prompt_name", text(among=lambda pipe: pipe.prompts), None,
          "One of the model's prompts, by name [default: its default prompt, if any]."),
    Param("prompt", text(), None, "A prompt (wins over prompt_name; '' for none)."),
)
# Which end of a text longer than the model is cut: TEI's truncation_direction (the tokenizers
# library's, as TEI truncates); "right", where sentence-transformers cuts, by default
DIRECTIONS = ("right", "left")
TRUNCATION_DIRECTION = Param(
    "truncation_direction", choice(DIRECTIONS, fold_case=True), "right",
    "Which end of a text longer than the model is cut (left: its start).",
    Flag(options=DIRECTIONS))


def _top_k_or_all(value: str | None):
    """classify's --top-k: left out -> transformers' flat shape, 'all' -> every label."""
    if value is None:
        return LEGACY
    if value == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_TOP_K:
        raise InputError(f"--top-k must be an integer from 1 to {MAX_TOP_K} or 'all', got "
                         f"{value!r}", "pass --top-k 3")
    return n


TASKS: Mapping[str, Task] = MappingProxyType({t.name: t for t in (
    Task("fill-mask", (), "mlm", "ForMaskedLM", (("logits", _BS),), (2, "vocab_size"),
         "fill-mask", "Predict [MASK] tokens.", "fill_mask:FillMaskPipeline", ("text",), (
        # top_k past the vocabulary (or the targets) gives them all, as many as there are
        Param("top_k", integer(1, MAX_TOP_K, example=5), 5, "Proposals per mask."),
        Param("targets", strings(single=True, words=True), None,
              "Words to score instead of the whole vocabulary.",
              Flag(parse=_words, metavar="WORDS",
                   help="Comma-separated words to score instead of the whole vocabulary.")),
    ), per_token=True, agreement="mask-top1", vector_output=False, example=_masked,
        hf_truncation=False),
    Task("text-classification", ("sentiment-analysis",), "sequence", "ForSequenceClassification",
         (("logits", _B),), (1, "num_labels"), "classify", "Classify texts or text pairs.",
         "text_classification:TextClassificationPipeline", ("text", "text_pair"), (
        # left out: the best label in transformers' legacy shape; None (null): every label
        Param("top_k", top_k_or_all(LEGACY), LEGACY, "Labels per text, sorted.",
              Flag(parse=_top_k_or_all, default=None, metavar="N|all",
                   help="Labels per text, sorted; 'all' for every label [default: the best "
                        "one, in transformers' flat shape]."),
              # one best label per text over /v2: several would make the rows ragged
              v2=False),
        Param("function_to_apply", choice(FUNCTIONS, none=True, fold_case=True), None,
              "Scores from the logits: default follows problem_type and the label count.",
              Flag(default="default", options=FUNCTIONS, old=("--function",))),
    ), per_token=False, agreement="argmax", vector_output=False, example=_text,
        hf_truncation=True, raw_scores={"function_to_apply": "none"}),
    Task("token-classification", ("ner",), "token", "ForTokenClassification",
         (("logits", _BS),), (2, "num_labels"), "tokens", "Label tokens (named entities).",
         "token_classification:TokenClassificationPipeline", ("text",), (
        Param("aggregation_strategy", choice(AGGREGATIONS, fold_case=True), "none",
              "How tokens are grouped into words and entities.",
              Flag(options=AGGREGATIONS, old=("--aggregation",))),
        Param("ignore_labels", strings(single=False), None,
              "Labels left out of the answer (default: O).",
              Flag(default="O", parse=_labels, metavar="LABELS",
                   help="Comma-separated labels not to show ('' shows all).")),
        Param("stride", integer(0, lambda pipe: pipe.room - 1, none=True, example=16), None,
              "Token overlap between windows of long texts."),
    ), per_token=True, agreement="token-argmax", vector_output=False, example=_text,
        hf_truncation=False),
    Task("question-answering", (), "span", "ForQuestionAnswering",
         (("start_logits", _BS), ("end_logits", _BS)), None, "qa",
         "Answer questions from a context.", "question_answering:QuestionAnsweringPipeline",
         ("question", "context"), (
        # the best span per question over /v2 (top_k 1): several would make the rows ragged
        Param("top_k", integer(1, MAX_TOP_K), 1, "Answers per question.", v2=False),
        Param("doc_stride", integer(0, none=True, example=128), None,
              "Overlap between context windows (default min(max_seq_len // 2, 128))."),
        Param("max_answer_len", integer(1, example=15), 15, "Longest answer, in tokens."),
        Param("max_seq_len", integer(1, lambda pipe: pipe.max_length, none=True, example=384),
              None, "Tokens per window (default min(model max, 384)).", Flag(low=8)),
        Param("max_question_len", integer(1, example=64), 64, "Longest question, in tokens."),
        Param("handle_impossible_answer", boolean(), False, "Allow the empty answer."),
        Param("align_to_words", boolean(), True, "Answers start and end on word boundaries.",
              Flag(negatable=True)),
    ), per_token=False, agreement="span", vector_output=False, example=_question,
        hf_truncation=False),
    Task("feature-extraction", (), "identity", "Model", (("last_hidden_state", _BS),),
         (2, "hidden_size"), "embed", "Sentence embeddings and cosines.",
         "feature_extraction:FeatureExtractionPipeline", ("text",), (
        # An export of a sentence-transformers folder runs its modules (Pooling, Dense,
        # Normalize: runtime/core/sentence_modules.py) with its pooling, normalize and prompt
        # as defaults. pooling "none" (a [T, H] matrix per text) would make /v2 rows ragged
        Param("pooling", joined(POOLING_MODES, alone=("none",)), "mean",
              "How token vectors become one: " + ", ".join(POOLING_MODES) + ", several joined "
              "by '+', or none (token vectors); a sentence-transformers folder's own by default.",
              Flag(metavar="MODE[+MODE]"), v2=joined(POOLING_MODES)),
        # Unit vectors by default, on every entry point: what sentence embeddings are used for
        # (cosine search) and what the other embedding APIs return — OpenAI's embeddings,
        # TEI's /embed (`normalize` defaults to true: router/src/http/types.rs, EmbedRequest)
        # and sentence-transformers models with a Normalize module (all-MiniLM-L6-v2). A
        # sentence-transformers folder without one (a dot-product model) keeps its raw
        # vectors. Raw ones are a parameter away: normalize=False, the same name everywhere.
        Param("normalize", boolean(), True,
              "Unit-length vectors (cosine similarity = dot product; an export of a "
              "sentence-transformers folder: as the folder chose by default).",
              Flag(negatable=True)),
        # sentence-transformers' encode(truncate_dim=k): the first k values, renormalized when
        # normalize; a folder that declares matryoshka_dimensions takes only those. Off /v2:
        # its output's width is declared once per model
        Param("dimensions", integer(1, lambda pipe: pipe.dimension, none=True, example=128),
              None, "Keep each vector's first k values (renormalized when normalized); a "
              "Matryoshka model: one of its declared sizes.", Flag(metavar="K"), v2=False),
        *PROMPT_PARAMS, TRUNCATION_DIRECTION,
        # vLLM's chunked processing (pipelines/chunks.py); the server's --long-inputs chunk
        # sets it for a TEI request with truncate false (which TEI refuses)
        Param("long_inputs", choice(LONG_INPUTS), "truncate",
              "A text past the model's length: truncate (cut, with a warning), or chunk "
              "(overlapping windows of the model's length, pooled, token-weighted mean).",
              v2=False),
        Param("return_tensors", boolean(), False, "numpy arrays instead of lists.",
              flag=None, request=False, v2=False),
    ), per_token=False, agreement="cosine", vector_output=True, example=_text,
        hf_truncation=False),
    # ColBERT (a PyLate folder): the encoder's token vectors, as feature-extraction's graph
    # answers them; prefixes, query expansion, Dense, normalization and the skiplist run in
    # pipelines/multi_vector.py (after feature-extraction: a plain Model checkpoint's task)
    Task("multi-vector", (), "identity", "Model", (("last_hidden_state", _BS),),
         (2, "hidden_size"), "embed-multi", "Token vectors of texts (ColBERT, late interaction).",
         "multi_vector:MultiVectorPipeline", ("text",), (
        # PyLate's encode(is_query=True) by default; documents here (a document encoded as a
        # query would be cut to the query length)
        Param("is_query", boolean(), False,
              "Encode queries (prefix, [MASK] expansion to the query length), not documents.",
              Flag(negatable=True)),
        Param("normalize", boolean(), True, "Unit-length token vectors (PyLate's default).",
              Flag(negatable=True)),
        # PyLate's encode(pool_factor=, protected_tokens=): a document's token vectors merged
        # by hierarchical clustering (scipy, the colbert extra) to 1/pool_factor of them
        Param("pool_factor", integer(1, lambda pipe: pipe.max_length, example=2), 1,
              "Documents: pool token vectors to 1/k of them (PyLate's; 1: none)."),
        Param("protected_tokens", integer(0, lambda pipe: pipe.max_length, example=1), 1,
              "Documents: leading tokens kept out of pooling (PyLate's; 1: [CLS])."),
        # {"query", "documents"} inputs are ranked by MaxSim (TEI's /rerank, Cohere's and
        # `bertonnx rerank` on this export): text-ranking's two options, there only
        Param("top_k", integer(1, MAX_TOP_K, none=True, example=10), None,
              "Ranking: the best k documents (default: every one).", flag=None, v2=False),
        Param("return_documents", boolean(), False, 'Ranking: each result holds its document '
              '("text").', flag=None, v2=False),
    ), per_token=False, agreement="cosine", vector_output=False, example=_text,
        hf_truncation=False),
    # BGE-M3 (a FlagEmbedding folder: XLM-R + colbert_linear.pt + sparse_linear.pt): the
    # encoder's token vectors, as feature-extraction's graph answers them; the three outputs
    # (dense [CLS], lexical weights, colbert vectors) from that one run in pipelines/bge_m3.py
    Task("bge-m3", (), "identity", "Model", (("last_hidden_state", _BS),),
         (2, "hidden_size"), "embed-m3", "Dense, sparse and multi-vector (BGE-M3) embeddings.",
         "bge_m3:BgeM3Pipeline", ("text",), (
        # BGEM3FlagModel.encode's names; all three by default (one forward pass answers them)
        Param("return_dense", boolean(), True, "The dense vector ([CLS]).",
              Flag(negatable=True)),
        Param("return_sparse", boolean(), True, "The lexical weights ({index, value} by id).",
              Flag(negatable=True)),
        Param("return_colbert_vecs", boolean(), True,
              "The multi-vector (ColBERT) token vectors.", Flag(negatable=True)),
        # BGEM3FlagModel's normalize_embeddings: the dense and colbert vectors
        Param("normalize", boolean(), True, "Unit-length dense and colbert vectors.",
              Flag(negatable=True)),
        # encode's max_length: FlagEmbedding cuts at 512 tokens unless told otherwise
        Param("max_length", integer(1, lambda pipe: pipe.max_length, none=True, example=512),
              None, "Tokens per text (default min(512, the model's); BGE-M3 reads 8192)."),
    ), per_token=False, agreement="cosine", vector_output=False, example=_text,
        hf_truncation=False),
    # SPLADE: the MLM head's logits pooled inside the graph (build/heads.py SpladeHead), so the
    # graph answers (B, V) and never hands out the (B, T, V) logits; pipelines/sparse_embedding
    Task("sparse-embedding", (), "splade", "ForMaskedLM", (("sparse_embedding", _B),),
         (1, "vocab_size"), "embed-sparse", "Sparse (SPLADE) vocabulary weights of texts.",
         "sparse_embedding:SparseEmbeddingPipeline", ("text",), (
        # sentence-transformers' SparseEncoder.decode(top_k=...); null keeps every non-zero
        Param("top_k", integer(1, MAX_TOP_K, none=True, example=64), None,
              "Keep the k largest weights of each text (default: every non-zero one)."),
        Param("return_tokens", boolean(), False,
              "Name each index's vocabulary token (\"token\")."),
        *PROMPT_PARAMS, TRUNCATION_DIRECTION,
    ), per_token=False, agreement="sparse", vector_output=False, example=_text,
        hf_truncation=False),
    # A sequence classifier of one label scoring (query, document) pairs: a cross-encoder
    # (sentence-transformers' CrossEncoder.rank; pipelines/text_ranking.py). Over /v2 a row is
    # one pair and its score (a ranked list per query would make the rows ragged).
    Task("text-ranking", (), "sequence", "ForSequenceClassification", (("logits", _B),),
         (1, "num_labels"), "rerank", "Rerank documents for a query (a cross-encoder).",
         "text_ranking:TextRankingPipeline", ("query", "documents"), (
        Param("top_k", integer(1, MAX_TOP_K, none=True, example=10), None,
              "The best k documents (default: every one).", v2=False),
        Param("return_documents", boolean(), False, 'Each result holds its document ("text").',
              v2=False),
        Param("raw_scores", boolean(), False, "The model's logits, no activation."),
        # a CrossEncoder folder's own activation, recorded at export (Manifest.defaults)
        Param("activation_fn", choice(ACTIVATIONS), "sigmoid", "What turns logits into scores.",
              flag=None, request=False, v2=False),
        *PROMPT_PARAMS, TRUNCATION_DIRECTION,
    ), per_token=False, agreement="ranking", vector_output=False, example=_ranked,
        hf_truncation=False),
    # An NLI classifier asked whether each text entails "This example is {label}." for every
    # candidate label (transformers' ZeroShotClassificationPipeline;
    # pipelines/zero_shot_classification.py). Over /v2 every row has the request's labels.
    Task("zero-shot-classification", (), "sequence", "ForSequenceClassification",
         (("logits", _B),), (1, "num_labels"), "zero-shot",
         "Classify texts into labels named at run time (an NLI model).",
         "zero_shot_classification:ZeroShotClassificationPipeline", ("text",), (
        Param("candidate_labels", strings(single=True, words=True), None,
              "The labels to choose from: a list, or one comma-separated string (required).",
              Flag(metavar="LABELS", help="Comma-separated labels to choose from (required)."),
              required=True),
        Param("hypothesis_template", template("This example is {}."), "This example is {}.",
              "The hypothesis each label is put in."),
        Param("multi_label", boolean(), False,
              "Labels are independent (each scored entailment against contradiction)."),
    ), per_token=False, agreement="pair-argmax", vector_output=False, example=_text,
        hf_truncation=False),
)})

EXPORT_TASKS = tuple(TASKS)
# transformers' other names for the same tasks
TASK_ALIASES = MappingProxyType({a: t.name for t in TASKS.values() for a in t.aliases})
# task -> ((output name, dynamic axes), ...), in the order the torch model returns them.
OUTPUTS = MappingProxyType({t: c.outputs for t, c in TASKS.items()})
COMMANDS = MappingProxyType({t.command: t for t in TASKS.values()})


def task_record(task: str) -> Task:
    """The task's record; an alias (e.g. "ner") names its task. ConfigError for unknown ones."""
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}")
    return TASKS[task]


def pipeline_class(task: str) -> type:
    """The task's pipeline class, imported only now (the CLI stays light until it runs)."""
    module, name = task_record(task).pipeline.split(":")
    return getattr(import_module(f"bertonnx.runtime.core.pipelines.{module}"), name)

