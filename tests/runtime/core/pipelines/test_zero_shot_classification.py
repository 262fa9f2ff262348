"""zero-shot-classification (issue 27, item 4): an NLI classifier exported with that task gives
transformers 4.57's ZeroShotClassificationPipeline answers — labels in the same order, scores
within 1e-4 — for one text and several, multi_label off and on, one label, a comma string, a
template of one's own, texts longer than the model, and an NLI model whose entailment class is
its first. A model whose labels name no entailment class is refused at export, in one line."""
from __future__ import annotations

import functools

import pytest

from bertonnx.export import ExportOptions, export_model
from bertonnx.runtime import load
from bertonnx.runtime.core.errors import ConfigError, InputError

from tests.conftest import SENTIMENT
from tests.runtime._compare import assert_same

ZS = "zero-shot-classification"
TEXTS = ["the cat sat on the mat", "london is a city with music and film",
         " ".join(["the dog ran to the river in paris ."] * 12)]   # past the 64 positions
CALLS = [dict(candidate_labels=["music", "city", "cat", "river"]),
         dict(candidate_labels="music, city,cat", multi_label=True),
         dict(candidate_labels=["music"]),   # one label: entailment against contradiction
         dict(candidate_labels=["music", "film"], hypothesis_template="this is about {} .")]


@functools.lru_cache(maxsize=2)
def reference(folder):
    """transformers' pipeline on the checkpoint (made once a folder)."""
    # transformers only here: the runtime under test never imports it
    import transformers

    transformers.logging.set_verbosity_error()
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    tok.model_max_length = model.config.max_position_embeddings   # as tests/runtime/conftest
    return transformers.pipeline(ZS, model=model, tokenizer=tok, device="cpu")


@pytest.mark.parametrize("call", CALLS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_equals_transformers(tiny_checkpoint, ours, call):
    ref, pipe = reference(tiny_checkpoint(ZS)), ours(ZS)
    want = ref(TEXTS, **call)
    got = pipe(TEXTS, **call)
    assert_same(got, want)
    assert [r["labels"] for r in got] == [r["labels"] for r in want]
    one = pipe(TEXTS[1], **call)   # one text: one dict
    assert_same(one, want[1])
    if set(call) == {"candidate_labels"}:   # the labels positionally, as transformers takes
        assert_same(pipe(TEXTS[1], call["candidate_labels"]), one)


def test_an_entailment_class_first(tiny_hf_checkpoint, tmp_path):
    """transformers reads contradiction from the last class when entailment is the first."""
    labels = {0: "ENTAILMENT", 1: "neutral", 2: "contradiction"}
    folder = tiny_hf_checkpoint("text-classification", labels=labels, initializer_range=0.5)
    export_model(folder, ZS, tmp_path / "out", ExportOptions(parity=False))
    ref, pipe = reference(folder), load(tmp_path / "out")
    for multi in (False, True):
        call = dict(candidate_labels=["music", "city", "cat"], multi_label=multi)
        assert_same(pipe(TEXTS, **call), ref(TEXTS, **call))


def test_a_model_without_an_entailment_class_is_refused(tiny_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match=r"is not an NLI model: none of its labels \(negative, "
                                          r"neutral, positive\) starts with 'entail'") as e:
        export_model(tiny_checkpoint("text-classification"), ZS, tmp_path / "out",
                     ExportOptions(parity=False))
    assert "\n" not in str(e.value) and list(SENTIMENT.values())[0] in str(e.value)
    assert not (tmp_path / "out").exists()


def test_bad_calls_are_one_line(ours):
    pipe = ours(ZS)
    for call, message in [({}, "candidate_labels is required"),
                          ({"candidate_labels": " , "}, "names no label"),
                          ({"candidate_labels": []}, "candidate_labels must be"),
                          ({"candidate_labels": ["a"], "hypothesis_template": "no slot"},
                           'hypothesis_template must be a string with "{}"'),
                          ({"candidate_labels": ["a"], "hypothesis_template": "{0} {1}"},
                           "hypothesis_template must be"),
                          ({"candidate_labels": ["a"], "multi_label": "yes"},
                           "multi_label must be true or false"),
                          ({"candidate_labels": [" ".join(["cat"] * 70)]},
                           "leaves no room for the text in the model's 64 tokens")]:
        with pytest.raises(InputError, match=message):
            pipe(TEXTS[0], **call)
    with pytest.raises(InputError, match="text #1 is empty"):
        pipe(["a", ""], candidate_labels=["x"])
