"""The core stands alone: runtime/core imports no application library and no application
module, build and export import only the core (their commands modules, the CLI layer, aside),
and `load()` answers with every application library made unimportable."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
APPLICATION_LIBRARIES = ("click", "starlette", "uvicorn", "ray", "pyarrow", "prometheus_client",
                         "tqdm", "torch", "transformers")
APPLICATIONS = tuple(f"bertonnx.runtime.{a}" for a in ("cli", "server", "bulk", "ray", "triton"))


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["bertonnx", *parts])


def imports(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file (lazy imports too), absolute."""
    here = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_the_checker_resolves_relative_imports():
    got = imports(ROOT / "runtime" / "core" / "pipelines" / "base.py")
    assert "bertonnx.runtime.core.tasks" in got and "tokenizers" in got


def test_the_core_imports_no_application():
    bad = []
    for f in sorted((ROOT / "runtime" / "core").rglob("*.py")):
        for name in imports(f):
            if (_under(name, APPLICATION_LIBRARIES) or _under(name, APPLICATIONS)
                    or _under(name, ("bertonnx.build", "bertonnx.export", "bertonnx.bench"))):
                bad.append(f"{f.relative_to(ROOT)}: {name}")
    assert bad == []


def test_build_and_export_import_only_the_core():
    bad = []
    for pkg in ("build", "export"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f.name == "commands.py":   # the CLI layer of build and export
                continue
            for name in imports(f):
                if _under(name, APPLICATIONS):
                    bad.append(f"{f.relative_to(ROOT)}: {name}")
    assert bad == []


def test_load_and_predict_with_every_application_library_unimportable():
    code = f"""
import importlib.abc, sys
BLOCKED = {APPLICATION_LIBRARIES!r}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is blocked")
        return None

sys.meta_path.insert(0, Block())
from bertonnx.runtime import load
from bertonnx.runtime.core.pipelines import PIPELINES  # every task's pipeline module
fill = load("default")
print(fill("Paris is the [MASK] of France.", top_k=1)[0]["token_str"])
print(sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[-2:] == ["capital", "[]"], out.stdout
