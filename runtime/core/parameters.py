"""The rules a task parameter's value must follow: type and range, checked once.

A task's record (tasks.py) gives each of its parameters a rule; `Pipeline.check_parameters`
applies them, from the pipeline's own call and from the server before a request is queued, so
a bad value is one `InputError` naming the parameter (HTTP 400) wherever it comes from. A rule
also says what it is (`kind`, bounds, options), so the command line derives its option types. The
rules are strict where transformers is loose: a boolean is `true`/`false`, not any truthy value
("false" is a non-empty string); an integer is an int, not 1e30 or True; a list of labels is a
list, not a string to iterate ("PER" would be {P, E, R}).

    Param("top_k", integer(1), 5, ...), Param("pooling", joined(POOLING_MODES), "mean", ...)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .errors import InputError

# The largest integer any parameter takes: past it numpy's int64 arithmetic overflows (a
# max_answer_len of 10^30 was an OverflowError, a 500 from the server).
INT_LIMIT = 2**31 - 1
# The most answers one input may ask for (every task's top_k), on every entry point: library,
# CLI, /predict, /v2 and bulk refuse more with the same message. The server's default
# per-request budget (runtime/server/settings.py Limits.max_answers) is the same number, so
# one input at the bound fits it. Fill-mask's top_k past the vocabulary still gives it all.
MAX_TOP_K = 1_000


@dataclass(frozen=True)
class Rule:
    """`ok(value, pipeline)` -> None when the value is fine, else what the parameter takes."""

    ok: Callable[[Any, Any], str | None]
    example: str          # a value that works, for the error's fix
    # what the rule takes, for the command line's option types: "int", "bool", "choice",
    # "joined", "text", "strings" or "other"; an int's bounds (`high` None: a bound the model
    # decides, or none)
    kind: str = "other"
    low: int | None = None
    high: int | None = None
    options: tuple[str, ...] = ()
    # an int's upper bound when the model decides it: pipeline -> bound (/openapi.json's maximum)
    limit: Callable[[Any], int] | None = None

    def check(self, name: str, value, pipeline) -> None:
        want = self.ok(value, pipeline)
        if want is not None:
            raise InputError(f"{name} must be {want}, got {_show(value)}",
                             f"pass e.g. {name}={self.example}", parameter=name)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(low: int, high: int | Callable | None = None, *, none: bool = False,
            example: int | None = None) -> Rule:
    """An int in [low, high]; `high` may be a function of the pipeline (the model's length)."""
    def ok(v, pipe):
        top = (high(pipe) if callable(high) else high) if high is not None else INT_LIMIT
        if v is None and none:
            return None
        if _is_int(v) and low <= v <= top:
            return None
        note = " (the model's limit)" if callable(high) else ""
        return f"an integer from {low} to {top}{note}" + (", or null" if none else "")
    return Rule(ok, str(example if example is not None else max(low, 1)), "int", low,
                high if isinstance(high, int) else None, limit=high if callable(high) else None)


def boolean() -> Rule:
    return Rule(lambda v, pipe: None if isinstance(v, bool) else "true or false", "true", "bool")


def choice(options, *, none: bool = False, fold_case: bool = False) -> Rule:
    """One of `options` (a str); `fold_case` accepts any case, as transformers lower()s."""
    def ok(v, pipe):
        if v is None and none:
            return None
        if isinstance(v, str) and (v.lower() if fold_case else v) in options:
            return None
        return "one of " + ", ".join(map(repr, options)) + (" or null" if none else "")
    return Rule(ok, repr(options[0]), "choice", options=tuple(options))


def joined(options, *, alone: tuple[str, ...] = (), sep: str = "+") -> Rule:
    """One of `options`, or several joined by `sep` ("cls+mean": feature-extraction's
    pooling modes, concatenated in that order), or one of `alone` on its own."""
    def ok(v, pipe):
        if isinstance(v, str) and (v in alone or (
                v and all(part in options for part in v.split(sep)))):
            return None
        return ("one of " + ", ".join(map(repr, (*options, *alone)))
                + f", or modes joined by {sep!r}")
    return Rule(ok, repr(options[0]), "joined", options=(*options, *alone))


def text(*, among: Callable | None = None) -> Rule:
    """A string or null; `among(pipeline)`, where given, names the strings it may be (an
    export's own, e.g. its prompt names)."""
    def ok(v, pipe):
        if v is None:
            return None
        if among is None or pipe is None:
            return None if isinstance(v, str) else "a string or null"
        names = list(among(pipe))
        if isinstance(v, str) and v in names:
            return None
        return ("one of " + ", ".join(map(repr, names)) + " or null" if names
                else "null (this model has none)")
    return Rule(ok, '"query"' if among else '"query: "', "text")


def strings(*, single: bool, none: bool = True, words: bool = False) -> Rule:
    """A list of strings (`single`: or one string); `words`: not empty, none of them blank
    (fill-mask's targets: an empty list would score nothing, not everything)."""
    def ok(v, pipe):
        if v is None and none:
            return None
        listed = [v] if single and isinstance(v, str) else v
        if isinstance(listed, (list, tuple)) and all(isinstance(x, str) for x in listed) and (
                not words or (listed and all(x.strip() for x in listed))):
            return None
        what = "word" if words else "string"
        return (f"a {what} or " if single else "") + (
            f"a non-empty list of {what}s" if words else f"a list of {what}s") + (
            " or null" if none else "")
    return Rule(ok, '["PER", "LOC"]' if not single else '["word"]', "strings")


def template(example: str) -> Rule:
    """A string with one "{}" that str.format fills (zero-shot's hypothesis_template): one that
    formats to itself, or cannot be formatted, is refused, as transformers refuses it."""
    def ok(v, pipe):
        try:
            if isinstance(v, str) and v.format("x") != v:
                return None
        except (IndexError, KeyError, ValueError):
            pass
        return 'a string with "{}" where the label goes'
    return Rule(ok, repr(example))


def top_k_or_all(left_out) -> Rule:
    """A positive int, null (every one), or the `left_out` marker (the default's own shape)."""
    top = integer(1, MAX_TOP_K)

    def ok(v, pipe):
        if v is left_out or v is None or top.ok(v, pipe) is None:
            return None
        return f"an integer from 1 to {MAX_TOP_K}, or null for every label"
    return Rule(ok, "2")


def check(rules: dict[str, Rule], values: dict, pipeline) -> None:
    """Every value whose name has a rule, checked (the caller's signature already refused
    unknown names)."""
    for name, value in values.items():
        rule = rules.get(name)
        if rule is not None:
            rule.check(name, value, pipeline)
