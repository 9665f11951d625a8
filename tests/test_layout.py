"""The layout the README's architecture section draws: no import cycles, modules that fit on a
few screens, a small analyze/ top level without prefix families of modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("analyze", "capture", "schemas")
MAX_LINES = 400
MAX_TOP_LEVEL_MODULES = 8


def module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports, anywhere in its text (module level, inside
    functions, under TYPE_CHECKING): `from a.b import c` is an edge to a.b.c when that is a
    module, else to a.b."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    # a -> b -> c -> a is one cycle; d -> a is not part of it
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_type_checking(tmp_path):
    package = tmp_path / "analyze"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "one.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from analyze.two import X\n")
    (package / "two.py").write_text("def f():\n    from analyze import one\n")
    modules = {"analyze": package / "__init__.py", "analyze.one": package / "one.py", "analyze.two": package / "two.py"}
    assert cycles(import_graph(modules)) == [["analyze.one", "analyze.two"]]


def test_no_import_cycles():
    found = cycles(import_graph(module_files()))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_over_the_size_limit():
    long = {name: n for name, path in module_files().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def test_analyze_top_level_is_small():
    top = sorted(p.name for p in (ROOT / "analyze").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_prefix_families_of_sibling_modules():
    """`neuromc_rules.py`, `neuromc_costs.py`, ... side by side are a package waiting to be a folder."""
    families = []
    for package in PACKAGES:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            prefixes = defaultdict(list)
            for path in (p for p in folder.glob("*_*.py") if not p.name.startswith("__")):
                prefixes[path.stem.split("_", 1)[0]].append(path.name)
            families += [sorted(names) for names in prefixes.values() if len(names) > 1]
    assert not families, families
