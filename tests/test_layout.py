"""The layout docs/design.md draws: one package `spiketrace` whose parts are the repository's
top-level folders, capture/ in rooms along the record path and analyze/ in rooms along the
analysis pipeline, each importing only rooms below it, no import cycles, modules that fit on a
few screens, a small analyze/ top level without prefix families of modules."""

from __future__ import annotations

import ast
import tomllib
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
            name = "spiketrace." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
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
    (package / "one.py").write_text("from typing import TYPE_CHECKING\n"
                                    "if TYPE_CHECKING:\n    from spiketrace.analyze.two import X\n")
    (package / "two.py").write_text("def f():\n    from spiketrace.analyze import one\n")
    modules = {"spiketrace.analyze": package / "__init__.py", "spiketrace.analyze.one": package / "one.py",
               "spiketrace.analyze.two": package / "two.py"}
    assert cycles(import_graph(modules)) == [["spiketrace.analyze.one", "spiketrace.analyze.two"]]


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


# capture/'s rooms along the record path, highest first: a module imports (at run time) only
# modules of its own room or of rooms below it. The framework callbacks (lightning,
# huggingface) sit on `live` (a Recorder driven by hooks, and the live analysis), which sits
# on the session. `context` (capture/context.py, the state one
# recording shares) sits between the rooms that write records and the store; the package's
# __init__ imports nothing of its rooms (its names are loaded lazily).
CAPTURE_ROOMS = ("lightning", "huggingface", "live", "session", "ops", "modules", "tensors", "context", "store", "native")


def _runtime_imports(path: Path) -> set[str]:
    """The spiketrace modules `path` imports outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spiketrace"):
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("spiketrace"))
    return found


def _capture_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "capture" and parts[2] in CAPTURE_ROOMS else None


def test_capture_rooms_import_only_rooms_below_them():
    rank = {room: len(CAPTURE_ROOMS) - i for i, room in enumerate(CAPTURE_ROOMS)}
    upward = []
    for name, path in module_files().items():
        room = _capture_room(name)
        if room is None:
            continue
        for target in _runtime_imports(path):
            other = _capture_room(target)
            if other is not None and rank[other] > rank[room]:
                upward.append(f"{name} ({room}) imports {target} ({other})")
    assert not upward, upward


def test_capture_is_only_rooms():
    loose = sorted(p.name for p in (ROOT / "capture").glob("*.py") if p.stem not in ("__init__", "context"))
    folders = sorted(p.name for p in (ROOT / "capture").iterdir() if p.is_dir() and p.name != "__pycache__")
    assert not loose and folders == sorted(set(CAPTURE_ROOMS) - {"context"}), (loose, folders)


def python_folders(root: Path = ROOT) -> set[str]:
    """Every folder of the three packages that holds a Python module, as its import name:
    a folder with an __init__.py and a namespace folder without one alike (a wheel leaves out
    any folder pyproject's `packages` does not name, whichever kind it is)."""
    return {"spiketrace." + ".".join(module.parent.relative_to(root).parts)
            for package in PACKAGES for module in (root / package).rglob("*.py")
            if "__pycache__" not in module.parts}


def test_the_package_list_names_every_folder():
    """pyproject.toml maps spiketrace.capture/analyze/schemas onto the folders and lists their
    packages one by one (setuptools cannot find packages under a mapped name): none missing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(config["packages"]) == python_folders()
    assert config["package-dir"] == {f"spiketrace.{package}": package for package in PACKAGES}


def test_the_folder_check_sees_a_namespace_folder(tmp_path):
    # analyze/present/ once held modules and no __init__.py: the wheel left it out and every
    # installed CLI command failed. A folder like it is named here all the same.
    (tmp_path / "analyze" / "present").mkdir(parents=True)
    (tmp_path / "analyze" / "__init__.py").write_text("")
    (tmp_path / "analyze" / "present" / "safe_text.py").write_text("")
    for package in ("capture", "schemas"):
        (tmp_path / package).mkdir()
    assert python_folders(tmp_path) == {"spiketrace.analyze", "spiketrace.analyze.present"}


# analyze/'s rooms along the analysis pipeline, highest first: a module imports (at run time,
# inside a function too) only modules of its own room or of rooms below it. A trace is opened
# (trace/); counters and energy models turn it into activity, reading which modules are
# neurons (neurons.py), and presets (data) price the activity (energy/ = activity x preset);
# many/ evaluates several traces the way one is; results.py computes each result of one trace
# once; present/ shows results and cli/ wires commands to them. progress.py (the terminal bars
# of long commands, used from counting up) sits below them all. The package's __init__ imports
# none of its rooms (its public names are loaded lazily, by name).
ANALYZE_ROOMS = ("cli", "live", "present", "results", "many", "energy", "presets", "counters", "neurons", "trace", "progress")


def _analyze_room(module: str) -> str | None:
    """The room of a spiketrace.analyze module; a public name of the package
    (`from spiketrace.analyze import Analysis`) is in the room of the module it comes from."""
    parts = module.split(".")
    if parts[:2] != ["spiketrace", "analyze"] or len(parts) < 3:
        return None
    if parts[2] in ANALYZE_ROOMS:
        return parts[2]
    import spiketrace.analyze

    source = spiketrace.analyze._PUBLIC.get(parts[2])
    return _analyze_room(source[0]) if source else None


def _upward_imports(modules: dict[str, Path]) -> list[str]:
    rank = {room: len(ANALYZE_ROOMS) - i for i, room in enumerate(ANALYZE_ROOMS)}
    upward = []
    for name, path in modules.items():
        room = _analyze_room(name)
        if room is None:
            continue
        for target in sorted(_runtime_imports(path)):
            other = _analyze_room(target)
            if other is not None and rank[other] > rank[room]:
                upward.append(f"{name} ({room}) imports {target} ({other})")
    return upward


def test_the_room_check_sees_imports_inside_functions(tmp_path):
    (tmp_path / "engine.py").write_text("def run():\n    from spiketrace.analyze.present.units import human\n")
    (tmp_path / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from spiketrace.analyze.results import Analysis\n")
    (tmp_path / "public.py").write_text("from spiketrace.analyze import Analysis\n")
    modules = {"spiketrace.analyze.counters.engine": tmp_path / "engine.py",
               "spiketrace.analyze.counters.typed": tmp_path / "typed.py",
               "spiketrace.analyze.energy.public": tmp_path / "public.py"}
    assert _upward_imports(modules) == [
        "spiketrace.analyze.counters.engine (counters) imports spiketrace.analyze.present.units (present)",
        "spiketrace.analyze.counters.engine (counters) imports spiketrace.analyze.present.units.human (present)",
        "spiketrace.analyze.energy.public (energy) imports spiketrace.analyze.Analysis (results)"]


def test_analyze_rooms_import_only_rooms_below_them():
    upward = _upward_imports(module_files())
    assert not upward, upward


def test_analyze_is_only_rooms():
    """Every module of analyze/ is in a room: a folder, or one of the few top-level modules."""
    modules = {p.stem for p in (ROOT / "analyze").glob("*.py")} - {"__init__"}
    folders = {p.name for p in (ROOT / "analyze").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert modules | folders == set(ANALYZE_ROOMS) and not modules & folders, (modules, folders)
