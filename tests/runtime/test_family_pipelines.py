"""Every pipeline on every family gives transformers 4.57's answer (issue 13, runtime).

Tiny random checkpoints of each family with the family's own tokenizer trained here
(tests/family_tokenizers.py: byte-level BPE for RoBERTa, Unigram for XLM-R and ALBERT,
WordPiece for DistilBERT and ELECTRA), exported by bertonnx and served by its pipelines,
against transformers' pipeline on the same folder: fill-mask with `<mask>` and `Ġ`/`▁` token
strings, pairs without token types, QA offsets with BPE, NER words grouped by spaces.
"""
from __future__ import annotations

import pytest

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load
from bertonnx.runtime.contract import usable_positions

from tests.conftest import BIO, CLS, EMB, FM, NER, QA, SENTIMENT, make_checkpoint

from ._compare import assert_same

FAMILIES = ("roberta", "xlm-roberta", "camembert", "albert", "distilbert", "electra")
LABELS = {CLS: SENTIMENT, NER: BIO}
CONTEXT = ("Paris is the capital of France. The cat sat on the mat, and the dog ran to the "
           "river. She sells sea shells by the sea shore; they're really nice. ") * 2
TEXTS = ["The cat sat on the mat.", "Paris", "What is the capital of Germany? Berlin is.",
         "Hello, world! Don't stop believing.", "naïve café in Zürich"]


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """(model_type, task) -> (bertonnx pipeline, transformers pipeline), built once."""
    import transformers

    transformers.logging.set_verbosity_error()
    root = tmp_path_factory.mktemp("families")
    made = {}

    def get(model_type: str, task: str):
        if (model_type, task) not in made:
            ckpt = make_checkpoint(root / f"{model_type}-{task}", task, model_type=model_type,
                                   labels=LABELS.get(task))
            out = root / f"{model_type}-{task}-onnx"
            # the fused graph users get; parity is the export tests' business, here the
            # runtime is compared end to end
            export_model(ckpt, task, out, ExportOptions(parity=False))
            model = transformers.AutoModel.from_pretrained if task == EMB else getattr(
                transformers, {FM: "AutoModelForMaskedLM", CLS: "AutoModelForSequenceClassification",
                               QA: "AutoModelForQuestionAnswering",
                               NER: "AutoModelForTokenClassification"}[task]).from_pretrained
            ref_model = model(ckpt).eval()
            tok = transformers.AutoTokenizer.from_pretrained(ckpt)
            # the tiny models have 64 usable positions; transformers would assume 512
            tok.model_max_length = usable_positions(ref_model.config.to_dict())
            made[(model_type, task)] = (load(out), transformers.pipeline(
                task, model=ref_model, tokenizer=tok, device="cpu"))
        return made[(model_type, task)]

    return get


@pytest.mark.parametrize("model_type", FAMILIES)
def test_fill_mask(family, model_type):
    ours, theirs = family(model_type, FM)
    mask = theirs.tokenizer.mask_token
    assert ours.tokenizer.mask_token == mask
    texts = [f"The cat {mask} on the mat.", f"Paris is the {mask} of France.",
             f"{mask} starts here", f"naïve {mask} in Zürich"]
    for text in texts:
        assert_same(ours(text, top_k=5), theirs(text, top_k=5))
    two = f"The {mask} sat on the {mask}."
    assert_same(ours(two, top_k=3), theirs(two, top_k=3))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_text_classification(family, model_type):
    ours, theirs = family(model_type, CLS)
    assert_same(ours(TEXTS, top_k=None), theirs(TEXTS, top_k=None))
    pair = {"text": "What is the capital?", "text_pair": "Paris is the capital of France."}
    assert_same(ours(pair, top_k=None), theirs(pair, top_k=None))
    long = " ".join(TEXTS * 8)  # truncated to the model's 64 positions by both
    assert_same(ours(long), theirs(long, truncation=True))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_question_answering(family, model_type):
    ours, theirs = family(model_type, QA)
    for question in ("Where did the cat sit?", "What is the capital of France?"):
        kw = dict(question=question, context=CONTEXT, top_k=3, doc_stride=16, max_seq_len=48)
        assert_same(ours(**kw), theirs(**kw))
    kw = dict(question="Who?", context="The cat sat.", handle_impossible_answer=True, top_k=2)
    assert_same(ours(**kw), theirs(**kw))


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_token_classification(family, model_type, strategy):
    ours, theirs = family(model_type, NER)
    kw = dict(aggregation_strategy=strategy, ignore_labels=[])
    assert_same(ours(TEXTS, **kw), theirs(TEXTS, **kw))


@pytest.mark.parametrize("model_type", FAMILIES)
def test_feature_extraction(family, model_type):
    ours, theirs = family(model_type, EMB)
    assert_same(ours(TEXTS, pooling="none"), theirs(TEXTS))


def test_usable_positions_follow_the_family_table():
    from bertonnx.build.families import FAMILIES as BUILD_FAMILIES
    from bertonnx.runtime.contract import POSITIONS_FROM_PADDING

    assert {t for t, f in BUILD_FAMILIES.items() if f.positions_from_padding} == \
        POSITIONS_FROM_PADDING
    assert usable_positions({"model_type": "roberta", "max_position_embeddings": 514,
                             "pad_token_id": 1}) == 512
    assert usable_positions({"model_type": "bert", "max_position_embeddings": 512}) == 512
