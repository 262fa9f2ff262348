"""The tree's rules, checked: click only in commands modules and the CLI package (runtime/cli:
its entry, its commands and how they print),
every registered command defined in a `.commands` module, and `serve --help` light."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import click

from bertonnx.runtime.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("build", "export", "runtime", "bench")


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
