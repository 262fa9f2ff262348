"""bench/openvino_int8.py: its calibration never sees the text its accuracy is judged on."""
from __future__ import annotations

import pytest

from bertonnx.bench.inputs import prose_passages, prose_sentences
from bertonnx.bench.openvino_int8 import disjoint_calibration


def test_the_calibration_is_held_out_of_both_accuracy_sets():
    held = {"sentences": prose_sentences(512), "passages": prose_passages(128)}
    got = disjoint_calibration(held, 256)
    assert len(got) == len(set(got)) == 256
    assert not set(got) & set(held["sentences"])
    assert not [s for s in got if any(s in p for p in held["passages"])]
    # spread over the prose, not its first sentences
    pool = prose_sentences(100_000)
    assert pool.index(got[-1]) > len(set(pool)) // 2


def test_too_many_asked_is_one_line_with_the_most_it_can_give():
    held = {"sentences": prose_sentences(512), "passages": prose_passages(128)}
    with pytest.raises(SystemExit) as e:
        disjoint_calibration(held, 100_000)
    assert "--calibration" in str(e.value) and "\n" not in str(e.value)
