"""Every pipeline on every family gives transformers 4.57's answer (issue 13, runtime).

Tiny random checkpoints of each family with the family's own tokenizer trained here
(tests/family_tokenizers.py: byte-level BPE for RoBERTa, Unigram for XLM-R and ALBERT,
WordPiece for DistilBERT and ELECTRA), exported by bertonnx and served by its pipelines,
against transformers' pipeline on the same folder: fill-mask with `<mask>` and `Ġ`/`▁` token
strings, pairs without token types, QA offsets with BPE, NER words grouped by spaces.
"""
from __future__ import annotations

import pytest

from bertonnx.runtime import load
from bertonnx.runtime.core.families import usable_positions

from tests.conftest import CLS, EMB, FM, NER, QA, family_spec

from tests.runtime._compare import assert_same

FAMILIES = ("roberta", "xlm-roberta", "camembert", "albert", "distilbert", "electra",
            "deberta-v2", "modernbert", "mpnet")
AUTO_CLASSES = {FM: "AutoModelForMaskedLM", CLS: "AutoModelForSequenceClassification",
                QA: "AutoModelForQuestionAnswering", NER: "AutoModelForTokenClassification",
                EMB: "AutoModel"}
CONTEXT = ("Paris is the capital of France. The cat sat on the mat, and the dog ran to the "
           "river. She sells sea shells by the sea shore; they're really nice. ") * 2
TEXTS = ["The cat sat on the mat.", "Paris", "What is the capital of Germany? Berlin is.",
         "Hello, world! Don't stop believing.", "naïve café in Zürich"]


@pytest.fixture(scope="module")
def family(tiny_checkpoint, tiny_export):
    """(model_type, task) -> (bertonnx pipeline, transformers pipeline), built once; the
    export is the session's shared fused one (tests/conftest.py, parity checked)."""
    import transformers  # only with the references: the family-table test runs without it

    transformers.logging.set_verbosity_error()
    made = {}

    def get(model_type: str, task: str):
        if (model_type, task) not in made:
            name = family_spec(model_type, task)
            ckpt = tiny_checkpoint(name)
            ref_model = getattr(transformers, AUTO_CLASSES[task]).from_pretrained(ckpt).eval()
            tok = transformers.AutoTokenizer.from_pretrained(ckpt)
            # the tiny models have 64 usable positions; transformers would assume 512
            tok.model_max_length = usable_positions(ref_model.config.to_dict())
            made[(model_type, task)] = (load(tiny_export(name, parity=True)), transformers.pipeline(
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
    assert usable_positions({"model_type": "roberta", "max_position_embeddings": 514,
                             "pad_token_id": 1}) == 512
    assert usable_positions({"model_type": "bert", "max_position_embeddings": 512}) == 512
