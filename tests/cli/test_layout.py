"""The tree's rules, checked: click only in commands modules and the CLI package (runtime/cli:
its entry, its commands and how they print), every registered command defined in a `.commands`
module, `serve --help` light, no file over 400 lines (STYLE.md 17: a longer one holds two
concerns), and imports at a module's top unless a comment says why one waits in a function (a
heavy or optional library that a light module must not pull in, or a cycle)."""
from __future__ import annotations

import ast
import importlib
import io
import subprocess
import sys
import tokenize
from pathlib import Path

import click

from bertonnx.runtime.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("build", "export", "runtime", "bench")
MAX_LINES = 400


def _imports_click(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "click" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click":
            return True
    return False


def test_click_only_in_commands_modules():
    offenders = sorted(
        str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
        if p.name != "commands.py" and p.parent != ROOT / "runtime" / "cli"
        and _imports_click(p))
    assert offenders == []


def test_every_command_lives_in_a_commands_module():
    for name, cmd in COMMANDS.items():
        module, _, attr = cmd.target.partition(":")
        assert module.endswith(".commands"), name
        assert isinstance(getattr(importlib.import_module(module), attr), click.Command), name


def test_serve_help_imports_no_server_or_model_libraries():
    code = ("import sys\n"
            "from bertonnx.runtime.cli import main\n"
            "try:\n"
            "    main(['serve', '--help'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "heavy = ('starlette', 'uvicorn', 'onnxruntime', 'torch', 'onnx', 'ray')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-2000:]


def test_no_file_is_over_400_lines():
    lengths = {p: len(p.read_text(encoding="utf-8").splitlines())
               for folder in (*PACKAGES, "scripts", "tests") for p in (ROOT / folder).rglob("*.py")}
    assert len(lengths) > 100  # the walk found the tree
    long = sorted(f"{p.relative_to(ROOT)}: {n}" for p, n in lengths.items() if n > MAX_LINES)
    assert long == [], "split these by concern"


def _import_runs(tree: ast.AST):
    """Runs of adjacent import statements in a function (its blocks included), each once."""
    seen = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)   # a lambda's body is one expression
                run = []
                for stmt in [*stmts, None] if isinstance(stmts, list) else ():
                    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                        run.append(stmt)
                    elif run:
                        if id(run[0]) not in seen:
                            seen.add(id(run[0]))
                            yield run
                        run = []


def unexplained_lazy_imports(path: Path) -> list[str]:
    """Imports inside functions with no comment saying why: a run of them (blank lines between
    allowed) is explained by a comment on one of its lines or on the line above it."""
    text = path.read_text(encoding="utf-8")
    comments = {tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT}
    lines = text.splitlines()
    bad = []
    for run in _import_runs(ast.parse(text)):
        if not comments & set(range(run[0].lineno - 1, run[-1].end_lineno + 1)):
            bad += [f"{path.relative_to(ROOT)}:{s.lineno}: {lines[s.lineno - 1].strip()}"
                    for s in run]
    return bad


def test_the_lazy_import_checker(tmp_path):
    example = ROOT / "tests" / "cli" / "_lazy_example.py"   # under ROOT: the names are relative
    example.write_text("def a():\n    import json\n\n\n"
                       "def b():\n    # why\n    import json\n\n    import csv\n\n\n"
                       "def c():\n    try:  # why\n        import json\n"
                       "    except ImportError:\n        pass\n\n\n"
                       "def d():\n    x = 1\n    import json  # why\n", encoding="utf-8")
    try:
        assert unexplained_lazy_imports(example) == ["tests/cli/_lazy_example.py:2: import json"]
    finally:
        example.unlink()


def test_every_import_inside_a_function_says_why():
    bad = [line for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
           for line in unexplained_lazy_imports(p)]
    assert bad == [], "move these to the module top, or say on the line above why they wait"
