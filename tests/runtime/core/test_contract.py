"""Each task's input rules, the padded-batch builder and the windows every pipeline's loop
shares (the task records themselves: test_tasks.py)."""
from __future__ import annotations

import numpy as np
import pytest

from bertonnx.runtime import InputError
from bertonnx.runtime.core.batches import pad_batch, pad_encodings, pad_rows
from bertonnx.runtime.core.tasks import EXPORT_TASKS
from bertonnx.runtime.core.pipelines import (FeatureExtractionPipeline, FillMaskPipeline,
                                        Inputs, QAInput, QuestionAnsweringPipeline,
                                        TextClassificationPipeline, TextPair,
                                        TextRankingPipeline, TokenClassificationPipeline,
                                        Windows, ZeroShotClassificationPipeline)
from bertonnx.runtime.core.pipelines.text_classification import LEGACY
from bertonnx.runtime.server.protocol import PipelineRunner, Prepared

from tests.runtime._compare import assert_same

TEXT_TASKS = (FillMaskPipeline, TokenClassificationPipeline, FeatureExtractionPipeline)


# ---------------------------------------------------------------- input rules

@pytest.mark.parametrize("cls", TEXT_TASKS)
def test_plain_text_tasks_read_a_str_or_a_list(cls):
    one = cls.read_inputs("a [MASK] text")
    assert one.records == ("a [MASK] text",) and one.single and one.form == "str"
    many = cls.read_inputs(("x", "y"))
    assert many.records == ("x", "y") and not many.single
    assert cls.unwrap(["r"], one) == "r"
    assert cls.unwrap(["r"], cls.read_inputs(["x"])) == ["r"]   # a list of one stays a list
    with pytest.raises(InputError, match="text #1 is empty"):
        cls.read_inputs(["x", "  "])
    with pytest.raises(InputError, match="expected a string or a list"):
        cls.read_inputs({"text": "x"})
    with pytest.raises(InputError, match="text #0 is a int"):
        cls.read_inputs([3])


def test_text_classification_reads_texts_dicts_and_pairs():
    read = TextClassificationPipeline.read_inputs(
        ["a", {"text": "b", "text_pair": "c"}, ["d", "e"], {"text": "f"}])
    assert read.records == (TextPair("a"), TextPair("b", "c"), TextPair("d", "e"), TextPair("f"))
    assert not read.single
    lone = TextClassificationPipeline.read_inputs({"text": "b", "text_pair": "c"})
    assert lone.single and lone.form == "dict" and lone.records == (TextPair("b", "c"),)
    with pytest.raises(InputError, match="input #0 has keys"):
        TextClassificationPipeline.read_inputs([{"txt": "a"}])
    with pytest.raises(InputError, match="the text_pair of the input is empty"):
        TextClassificationPipeline.read_inputs({"text": "a", "text_pair": ""})
    with pytest.raises(InputError, match="cannot classify a int"):
        TextClassificationPipeline.read_inputs(3)


def test_text_classification_unwraps_as_transformers_does():
    best = {"label": "x", "score": 1.0}
    unwrap = TextClassificationPipeline.unwrap
    read = TextClassificationPipeline.read_inputs
    assert unwrap([best], read("a")) == [best]                 # lone str, no top_k: [best]
    assert unwrap([best], read("a"), top_k=LEGACY) == [best]
    assert unwrap([[best]], read("a"), top_k=1) == [best]      # top_k given: its list
    assert unwrap([best], read({"text": "a"})) == best          # lone dict: the dict
    assert unwrap([best, best], read(["a", "b"])) == [best, best]


def test_question_answering_reads_every_call_form():
    read = QuestionAnsweringPipeline.read_inputs
    pair = (QAInput("q", "c"),)
    for form in (read({"question": "q", "context": "c"}), read("q", "c"),
                 read(question="q", context="c")):
        assert form.records == pair and form.single
    listed = read([{"question": "q", "context": "c"}])
    assert listed.records == pair and not listed.single
    assert read(question=["q", "r"], context="c").records == (QAInput("q", "c"),
                                                              QAInput("r", "c"))
    assert read(question=["q", "r"], context=["c", "d"]).records[1] == QAInput("r", "d")
    with pytest.raises(InputError, match="2 questions but 1 contexts"):
        read(question=["q", "r"], context=["c"])
    with pytest.raises(InputError, match="input #0 is not a"):
        read([{"question": "q"}])
    with pytest.raises(InputError, match="the context of input #1 is empty"):
        read([{"question": "q", "context": "c"}, {"question": "q", "context": ""}])
    with pytest.raises(InputError, match="both a question and a context"):
        read(question="q")
    assert QuestionAnsweringPipeline.unwrap([{"answer": "a"}], listed) == [{"answer": "a"}]


@pytest.mark.parametrize("cls", [*TEXT_TASKS, TextClassificationPipeline,
                                 QuestionAnsweringPipeline, TextRankingPipeline,
                                 ZeroShotClassificationPipeline])
def test_read_inputs_pass_through_and_every_task_names_its_shapes(cls):
    read = Inputs(("x",), single=False)
    assert cls.read_inputs(read) is read
    assert cls.input_hint


def test_inputs_concat_and_split_round_trip():
    a = TextClassificationPipeline.read_inputs("a")
    b = TextClassificationPipeline.read_inputs(["b", "c"])
    merged = Inputs.concat([a, b])
    assert merged.records == a.records + b.records and not merged.single
    assert Inputs.split([1, 2, 3], [a, b]) == [[1], [2, 3]]
    with pytest.raises(RuntimeError, match="2 results for 3 inputs"):
        Inputs.split([1, 2], [a, b])
    assert a.listed().records == a.records and not a.listed().single


CALLS = {
    "fill-mask": (["the [MASK] sat", "a [MASK] ran to the river"], "one [MASK]", {"top_k": 2}),
    "text-classification": (["good", {"text": "a", "text_pair": "b"}], "bad", {}),
    "question-answering": ([{"question": "where?", "context": "the cat sat on the mat"}],
                           {"question": "who?", "context": "a dog ran"}, {"top_k": 2}),
    "token-classification": (["paris is big", "the cat"], "a dog in paris",
                             {"aggregation_strategy": "simple"}),
    "feature-extraction": (["the cat", "a dog ran"], "paris", {}),
    "multi-vector": (["the cat", "a dog ran to the river"], "paris", {"is_query": True}),
    "bge-m3": (["the cat", "a dog ran to the river"], "paris", {"return_dense": False}),
    "sparse-embedding": (["the cat", "a dog ran to the river"], "paris",
                         {"top_k": 5, "return_tokens": True}),
    "text-ranking": ([{"query": "the cat", "documents": ["a cat sat", "paris", "the dog"]},
                      {"query": "a dog", "documents": ["the dog ran"]}],
                     {"query": "paris", "documents": ["a city", "london is a city"]},
                     {"top_k": 2, "return_documents": True}),
    "zero-shot-classification": (["the cat sat", "london music"], "a dog in paris",
                                 {"candidate_labels": ["music", "city", "cat"]}),
}


def _listing(pipe):
    """`pipe` whose answers' arrays are lists (the comparison wants Python numbers)."""
    class Listing(type(pipe)):
        def __call__(self, *args, **kwargs):
            return _lists(super().__call__(*args, **kwargs))

    listing = object.__new__(Listing)
    listing.__dict__.update(pipe.__dict__)
    return listing


def _lists(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, dict):
        return {k: _lists(v) for k, v in x.items()}
    return [_lists(v) for v in x] if isinstance(x, list) else x


@pytest.mark.parametrize("task", EXPORT_TASKS)
def test_merged_calls_unwrap_to_each_call_alone(ours, task):
    """What the server does with several requests: read each, one call, split, unwrap."""
    pipe = ours(task)
    many, one, params = CALLS[task]
    if task in ("multi-vector", "bge-m3"):   # numpy arrays, compared as the lists they hold
        pipe = _listing(pipe)
    reads = [pipe.read_inputs(many), pipe.read_inputs(one)]
    merged = pipe(Inputs.concat(reads), **params)
    answers = [pipe.unwrap(part, r, **params)
               for part, r in zip(Inputs.split(merged, reads), reads)]
    assert_same(answers, [pipe(many, **params), pipe(one, **params)])
    assert_same(pipe(reads[1], **params), pipe(one, **params))   # read inputs as inputs
    # the server's runner does exactly this; per_input undoes unwrap (the CLI's tables)
    parts = PipelineRunner(pipe)(reads, params)
    assert_same([Prepared(r, params).answer(pipe, [part]) for r, part in zip(reads, parts)],
                answers)
    for answer, r, part in zip(answers, reads, Inputs.split(merged, reads)):
        assert_same(pipe.per_input(answer, r, **params), part)


@pytest.mark.parametrize("cls, x, in_list, ok", [
    (QuestionAnsweringPipeline, {"question": "q", "context": "c"}, False, True),
    (QuestionAnsweringPipeline, {"question": "q", "context": "c", "x": "y"}, False, False),
    (QuestionAnsweringPipeline, {"question": "q", "context": 3}, True, False),
    (QuestionAnsweringPipeline, "q", False, False),
    (TextClassificationPipeline, {"text": "a"}, False, True),
    (TextClassificationPipeline, {"text": "a", "text_pair": None}, False, False),
    (TextClassificationPipeline, ["a", "b"], True, True),
    (TextClassificationPipeline, ["a", "b"], False, False),
    (FillMaskPipeline, "a", True, True),
    (FillMaskPipeline, {"text": "a"}, False, False),
])
def test_each_task_names_the_json_shape_of_one_input(cls, x, in_list, ok):
    assert cls.is_json_input(x, in_list=in_list) is ok


# ---------------------------------------------------------------- batches and windows

def test_pad_batch_right_pads_to_the_longest_or_cuts_to_a_width():
    p = pad_batch([[5, 6, 7], [8]], pad_id=0, type_ids=[[0, 0, 1], [0]])
    assert p.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert p.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert p.token_type_ids.tolist() == [[0, 0, 1], [0, 0, 0]]
    assert p.lengths.tolist() == [3, 1] and p.input_ids.dtype == np.int64
    cut = pad_batch([[5, 6, 7], [8]], pad_id=9, width=2)
    assert cut.input_ids.tolist() == [[5, 6], [8, 9]] and cut.lengths.tolist() == [2, 1]
    assert cut.token_type_ids.tolist() == [[0, 0], [0, 0]]
    assert set(p.feeds()) == {"input_ids", "attention_mask", "token_type_ids"}


def test_pad_rows_keeps_trailing_axes():
    out = pad_rows([[(0, 1), (1, 3)], [(4, 5)]], -1)
    assert out.shape == (2, 2, 2) and out[1, 1].tolist() == [-1, -1]
    assert pad_rows([[None, 1]], np.nan, dtype=np.float64)[0, 0] != 0   # None → nan


def test_windows_know_their_input_and_place(ours):
    pipe = ours("token-classification")
    long_text = " ".join(["the cat sat on the mat"] * 30)
    windows = pipe.encode_windows(["a dog", long_text, "paris"], 24, 6)
    groups = windows.per_input(list(range(len(windows.encodings))))
    assert len(groups) == 3 and len(groups[0]) == len(groups[2]) == 1 and len(groups[1]) > 2
    assert windows.per_input(windows.part.tolist())[1] == list(range(len(groups[1])))
    assert windows.owner.tolist() == sorted(windows.owner.tolist())
    enc = pad_encodings(windows.encodings, pipe.tokenizer.pad_token_id)
    assert enc.input_ids.shape == (len(windows.encodings), 24)
    assert isinstance(windows, Windows)
