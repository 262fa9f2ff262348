"""The server's limits against a live `bertonnx serve` (issue 17; helpers in _live.py): a
request past a limit is refused naming the limit and its flag, every parameter is checked by
type and range, state stays bounded over parameter variants, and docs/server-limits.md's table
of limits is the settings'.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertonnx.runtime.core.pipelines.base import BACKEND_CACHE
from bertonnx.runtime.server.batching import BatchConfig
from bertonnx.runtime.server.commands import serve
from bertonnx.runtime.server.settings import Limits, ServeOptions, Timeouts, flag

from tests.conftest import EMB, FM, NER, QA

from ._live import LIMITS, no_5xx, status_error

NEW_VARIANTS = 32       # after a warm-up past BACKEND_CACHE; unbounded they took ~190 MB more
MEMORY_BUDGET_MB = 32   # RSS growth allowed over them (~5 tokenizer copies)

# -- limits: 413/400 naming the limit and its flag ------------------------------------------

LONG = "the cat sat on the [MASK] . " + "the dog ran to the river . " * 4   # ~37 tokens


@pytest.mark.parametrize("inputs, parameters, status, limit", [
    (["the [MASK] ."] * 17, {}, 413, "max_inputs"),
    ([LONG] * 8, {}, 413, "max_tokens"),
    ("the [MASK] sat on the [MASK] .", {"top_k": 30}, 400, "max_answers"),   # 30 × 2 masks
    ("x [MASK] " * 500, {}, 413, "max_body_bytes"),
], ids=["inputs", "tokens", "top_k-x-masks", "body"])
def test_a_request_past_a_limit_is_refused_naming_it(limits_server, inputs, parameters,
                                                     status, limit):
    status_got, err = status_error(limits_server.predict(inputs, **parameters))
    assert status_got == status, err
    assert flag(limit) in err["error"] and str(LIMITS[limit]) in err["error"], err
    # what fits the same limits is served
    assert limits_server.predict("the [MASK] .", top_k=25).status_code == 200


@pytest.mark.parametrize("inputs, parameters, status, limit", [
    ({"question": "who sat ?", "context": "the cat sat . " * 200}, {}, 413,
     "max_context_chars"),
    ([{"question": "who ?", "context": "the cat sat ."}] * 3, {"top_k": 10}, 400,
     "max_answers"),                                                 # 10 × 3 questions
], ids=["context-chars", "top_k-x-questions"])
def test_qa_limits_name_the_flag(qa_server, inputs, parameters, status, limit):
    status_got, err = status_error(qa_server.predict(inputs, **parameters))
    assert status_got == status and flag(limit) in err["error"], err


def test_token_classification_text_length_is_capped_before_tokenizing(ner_server):
    """Token classification windows whole texts, as QA its contexts: the same cap (default)."""
    chars = Limits().max_context_chars
    status, err = status_error(ner_server.predict(["paris is a city . " * (chars // 36 + 1)] * 2))
    assert status == 413 and f"{flag('max_context_chars')} {chars}" in err["error"], err


# -- every parameter checked by type and range, 400 naming it -------------------------------

BAD_PARAMETERS = [
    (FM, "top_k", "5"), (FM, "top_k", 1e30), (FM, "top_k", True), (FM, "targets", 3),
    (QA, "max_seq_len", "x"), (QA, "max_answer_len", 1e30), (QA, "doc_stride", -1),
    (QA, "handle_impossible_answer", 1), (QA, "align_to_words", "false"),
    (QA, "max_seq_len", 10_000),
    (NER, "ignore_labels", -1), (NER, "ignore_labels", "PER"), (NER, "stride", "2"),
    (NER, "aggregation_strategy", "nope"),
    (EMB, "normalize", "false"), (EMB, "normalize", 1), (EMB, "pooling", 3),
]
GOOD_INPUT = {FM: "the [MASK] sat .", QA: {"question": "who sat ?", "context": "the cat sat ."},
              NER: "paris is a city", EMB: "the cat sat"}
SERVER_OF = {FM: "limits_server", QA: "qa_server", NER: "ner_server", EMB: "emb_server"}


@pytest.mark.parametrize("task, name, value", BAD_PARAMETERS,
                         ids=[f"{t}-{n}={v!r}" for t, n, v in BAD_PARAMETERS])
def test_a_bad_parameter_is_a_400_naming_it(request, task, name, value):
    server = request.getfixturevalue(SERVER_OF[task])
    status, err = status_error(server.predict(GOOD_INPUT[task], **{name: value}))
    assert status == 400 and err["error"].startswith(f"{name} must be"), err
    no_5xx(server)


# -- bounded state ---------------------------------------------------------------------------


def _variants(n: int) -> list[dict]:
    """n distinct (max_seq_len, doc_stride) settings, each a tokenizer setting of its own."""
    pairs = [(seq, stride) for seq in range(24, 65) for stride in range(0, 16)]
    assert len(pairs) >= n
    return [{"max_seq_len": s, "doc_stride": d} for s, d in pairs[:n]]


def test_memory_stays_bounded_over_parameter_variants(qa_server):
    """Each (max_seq_len, doc_stride) needs a tokenizer copy (~6 MB with a 30k vocabulary);
    they live in an LRU of BACKEND_CACHE, so after a warm-up that fills it, NEW_VARIANTS
    more leave the server's RSS within MEMORY_BUDGET_MB (unbounded: ~6 MB each)."""
    qa = {"question": "who sat ?", "context": "the cat sat on the mat . " * 12}
    warm = BACKEND_CACHE + 4
    variants = _variants(warm + NEW_VARIANTS)
    for params in variants[:warm]:
        assert qa_server.predict(qa, **params).status_code == 200
    before = qa_server.rss_mb()
    peak = before
    for params in variants[warm:]:
        r = qa_server.predict(qa, **params)
        assert r.status_code == 200, r.text
        peak = max(peak, qa_server.rss_mb())
    print(f"\nQA server RSS over {NEW_VARIANTS} parameter variants: {before:.0f} MB -> "
          f"{qa_server.rss_mb():.0f} MB (peak {peak:.0f} MB)")
    assert peak - before <= MEMORY_BUDGET_MB


def test_tokenizer_copies_stay_within_the_cache(ours):
    """The library side of the same bound: token classification's `stride` and QA's
    settings each need a copy; any sequence of them keeps at most BACKEND_CACHE."""
    ner, qa = ours(NER), ours(QA)
    for stride in range(3 * BACKEND_CACHE):
        ner("paris is a city with a river . " * 8, stride=stride)
        assert len(ner._backends) <= BACKEND_CACHE
    for params in _variants(3 * BACKEND_CACHE):
        qa(question="who sat ?", context="the cat sat on the mat . " * 12, **params)
        assert len(qa._backends) <= BACKEND_CACHE



# -- docs/server-limits.md's table of limits is the settings' --------------------------------


def _readme_limits() -> dict[str, str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "server-limits.md").read_text(
        encoding="utf-8")
    section = text.split("## Flags and defaults", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+?) \|", section, re.M)
    return {name: default.strip() for name, default in rows}


def test_the_readme_lists_every_limit_with_its_default():
    # every field of Limits and Timeouts, and the connection and batching bounds
    settings = {**{flag(k): v for k, v in vars(Limits()).items()},
                **{flag(k): v for k, v in vars(Timeouts()).items()},
                "--max-connections": ServeOptions.max_connections,
                "--max-batch-size": BatchConfig.max_batch_size,
                "--part-size": BatchConfig.part_size,
                "--max-wait-ms": BatchConfig.max_wait_ms}
    # the click defaults are the settings' (one source of truth for both)
    options = {f"--{o.name.replace('_', '-')}": o for o in serve.params}
    assert set(settings) <= set(options), set(settings) - set(options)
    defaults = {name: options[name].default for name in settings}
    assert defaults == settings
    assert _readme_limits() == {k: f"{v:g}" if isinstance(v, float) else str(v)
                                for k, v in settings.items()}
