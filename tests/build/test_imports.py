"""No import cycles inside the packages (build/heads.py and build/checkpoint.py used to import
each other): the module graph, read from the source's import statements, is acyclic."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"build": "bertonnx.build", "export": "bertonnx.export", "runtime": "bertonnx.runtime"}


def module_names() -> dict[str, tuple[Path, bool]]:
    mods = {}
    for folder, pkg in PACKAGES.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts
                     if p != "__init__"]
            mods[".".join([pkg, *parts])] = (f, f.name == "__init__.py")
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file, lazily or not)."""
    mods = module_names()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        here = name if is_pkg else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[:len(here.split(".")) - max(node.level - 1, 0)]
                target = ".".join(base + [node.module]) if node.level and node.module else \
                    ".".join(base) if node.level else node.module
                for alias in node.names:  # `from . import x` imports module x, not the package
                    sub = f"{target}.{alias.name}"
                    deps.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(u):
        state[u] = "open"
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == "open":
                return stack[stack.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = "done"
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_the_checker_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 40 and graph["bertonnx.export.api"]  # the checker reads the tree
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_heads_and_checkpoint_do_not_import_each_other():
    graph = import_graph()
    assert "bertonnx.build.heads" in graph["bertonnx.build.checkpoint"]
    assert "bertonnx.build.checkpoint" not in graph["bertonnx.build.heads"]
