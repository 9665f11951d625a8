"""The C of capture/native/ (the optional extension spiketrace.capture.native._native): files by
role that fit on a few screens, functions that fit on one, every file built; and what the
compiled record shares with the Python it mirrors defined once, in the extension
(capture/native/record/interface.h), held equal here to every Python definition it mirrors,
with every name the C reads by string present on the objects it reads it from."""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch import nn

import spiketrace.capture.native
from spiketrace.analyze import open_trace
from spiketrace.capture import Recorder
from spiketrace.capture.modules import module_events
from spiketrace.capture.native.counters import PythonCounter
from spiketrace.capture.ops import arguments, dispatch, native_record
from spiketrace.capture.session.example import LIF
from spiketrace.capture.store.table_buffer import BUFFER_GROUPS, BUFFER_RUNS, INTERNED_PER_GROUP, NULL_SENTINELS
from spiketrace.capture.tensors import registry as tensors
from spiketrace.schemas.statistics_levels import LEVELS

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "capture" / "native"
C_FILES = sorted((ROOT / "capture").rglob("*.[ch]"))
MAX_LINES = 400  # tests/test_layout.py's limit for a module
MAX_FUNCTION_LINES = 80

_native = spiketrace.capture.native._native
needs_extension = pytest.mark.skipif(_native is None, reason="the extension is not built")


# -- the layout ----------------------------------------------------------------------------------

def _code_lines(text: str) -> list[str]:
    """The C text's lines with comments and string and character literals blanked and
    preprocessor lines (with their continuations: macros) emptied, line numbers kept."""
    text = re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    lines, continued = text.split("\n"), False
    for i, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[i] = ""
    return lines


def c_functions(text: str) -> list[tuple[str, int]]:
    """(name, lines from its opening brace to its closing one) of each top-level function
    definition: a brace at file level whose text since the last `;` or `}` ends in `)` and holds
    no `=` (an initializer, a struct or an enum is none)."""
    found, depth, head, start = [], 0, "", None
    for number, line in enumerate(_code_lines(text), 1):
        for char in line + "\n":
            if depth == 0 and char == "{":
                name = re.search(r"(\w+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$", head)
                start = (name.group(1), number) if name and "=" not in head else None
                depth, head = 1, ""
            elif depth == 0:
                head = "" if char == ";" else head + char
            elif char in "{}":
                depth += 1 if char == "{" else -1
                if depth == 0 and start is not None:
                    found.append((start[0], number - start[1] + 1))
    return found


def test_the_function_finder_finds_functions_and_only_them():
    text = """
    #define TWICE(x) \\
        { (x); (x); }
    typedef struct { int a; } Pair;   /* { */
    static const char *names[] = {"a{", "b"};
    static int f(int a, void (*g)(int)) {
        if (a) { return 1; }
        return '}';
    }
    enum { A, B };
    int g(void)
    {
        return 0;
    }
    """
    assert c_functions(text) == [("f", 4), ("g", 3)]


def test_no_c_file_over_the_size_limit():
    long = {str(p.relative_to(ROOT)): n for p in C_FILES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"C files over {MAX_LINES} lines (split them by role): {long}"


def test_no_c_function_over_a_screen():
    long = {f"{p.relative_to(ROOT)} {name}": n for p in C_FILES if p.suffix == ".c"
            for name, n in c_functions(p.read_text()) if n > MAX_FUNCTION_LINES}
    assert not long, f"C functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {long}"


def test_no_prefix_families_of_sibling_c_files():
    """`_native_pairs.c`, `_native_rules.c`, ... side by side are a folder waiting to be made
    (tests/test_layout.py's rule for modules); a .c and its .h are one name."""
    families = []
    for folder in {p.parent for p in C_FILES}:
        prefixes = defaultdict(set)
        for path in folder.glob("*_*.[ch]"):
            prefixes[path.stem.split("_", 1)[0]].add(path.stem)
        families += [sorted(stems) for stems in prefixes.values() if len(stems) > 1]
    assert not families, families


def test_the_extension_builds_every_c_file():
    modules = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["ext-modules"]
    (extension,) = [m for m in modules if m["name"] == "spiketrace.capture.native._native"]
    on_disk = {p.relative_to(ROOT).as_posix() for p in NATIVE.rglob("*.c")}
    assert set(extension["sources"]) == on_disk and len(extension["sources"]) == len(on_disk)
    assert {p.relative_to(ROOT).as_posix() for p in NATIVE.rglob("*.h")} <= set(extension["depends"])
    assert not list((ROOT / "capture").rglob("*.c")) or all(p.is_relative_to(NATIVE) for p in C_FILES)


def test_the_record_reads_names_only_through_its_table():
    """record/reads.c interns every name the C reads off a Python object; no other file reads or
    sets an attribute, or calls a method, by a string of its own."""
    by_string = re.compile(r"\b(?:PyObject_(?:Get|Set|Has)AttrString|PyObject_CallMethod\w*\s*\([^,]+,\s*\"|"
                           r"PyUnicode_InternFromString)\b")
    allowed = {NATIVE / "record" / "reads.c", NATIVE / "record" / "interface.c"}
    found = [f"{p.relative_to(ROOT)}:{n}" for p in C_FILES if p not in allowed
             for n, line in enumerate(p.read_text().splitlines(), 1) if by_string.search(line)]
    assert not found, found


# -- what the record shares with the Python --------------------------------------------------------

@needs_extension
def test_the_record_numbers_are_the_extensions():
    exported = {name for name in dir(_native) if name.startswith("PROPAGATE_")}
    assert exported == {name for name in native_record.FALLBACK if name.startswith("PROPAGATE_")}
    for name, fallback in native_record.FALLBACK.items():  # what stands where the extension is missing
        assert getattr(_native, name) == fallback == getattr(native_record, name), name
    assert native_record.MAX_LISTED == _native.MAX_TENSORS - 2
    assert len(arguments._ARG_SLOTS) == _native.MAX_ARGS
    assert _native.NULL_SENTINEL == NULL_SENTINELS["tensors"]["nnz"] == NULL_SENTINELS["tensors"]["is01"]
    assert _native.INTERNED_LIMIT == INTERNED_PER_GROUP == arguments._INTERNED_LIMIT == dispatch.WHERES_KEPT
    assert _native.EMPTY_KWARGS_JSON == arguments.encode_call((), {}, torch.zeros(1))[1] == "{}"
    # a tuple out (None, tensor, None, tensor) whose tensors are the call's 3rd and 4th
    key = 2 | 4 << _native.OUT_KEY_ITEMS_SHIFT | 0b1010 << _native.OUT_KEY_PRESENT_SHIFT
    assert arguments.out_list_json(key) == '[null,{"$t":2},null,{"$t":3}]'


@needs_extension
def test_the_record_orders_are_the_pythons():
    assert _native.LEVELS == LEVELS
    assert _native.EVENT_COLUMNS == dispatch._EVENT_COLUMNS
    assert _native.USE_COLUMNS == (*BUFFER_RUNS["event_tensors"], *dispatch._USE_COLUMNS)
    assert _native.ROW_COLUMNS == tensors.ROW_COLUMNS
    assert _native.FORM_FIELDS == tensors._FORM == BUFFER_GROUPS["tensors"]["$form"]
    assert _native.STAGE_FIELDS == BUFFER_GROUPS["events"]["$stage"]
    assert _native.WHERE_FIELDS == BUFFER_GROUPS["events"]["$where"]
    assert _native.MODULE_EVENT_COLUMNS == module_events._COLUMNS
    assert _native.HOOK_FIELDS == module_events._HOOK == BUFFER_GROUPS["module_events"]["$hook"]
    assert set(_native.HOOK_INPUT_KINDS) == module_events._INPUT_KINDS
    assert set(_native.HOOK_OUTPUT_KINDS) == module_events._OUTPUT_KINDS
    assert _native.BIT_FORMAT_FIELDS == spiketrace.capture.native.BitFormat._fields


@needs_extension
def test_what_the_record_is_given_is_in_its_order(tmp_path):
    """The buffers' free columns, a registry entry as each path writes it, an op's compiled plan
    as OpLog keeps it, the stage name of an event outside a stage."""
    python_described, compiled_described, x = torch.rand(3, 2), torch.zeros(4), torch.rand(3)
    expected = {id(t): (int(t.count_nonzero()), bool(((t == 0) | (t == 1)).all()))
                for t in (python_described, compiled_described)}
    with Recorder(tmp_path / "trace") as recorder:
        registry, ops, context = recorder.registry, recorder.ops, recorder.context
        assert set(_native.FREE_COLUMNS) == set(registry.frees.columns)
        field = {name: i for i, name in enumerate(_native.ENTRY_FIELDS)}
        for t, describe in ((python_described, registry.describe), (compiled_described, ops.native.describe)):
            tensor_id = describe(t, context.take_seq())
            entry = registry.entries[id(t)]
            assert len(entry) == len(field) and entry[field["tensor_id"]] == tensor_id
            assert entry[field["ref"]]() is t and entry[field["shape"]] == t.shape
            assert entry[field["version"]] == t._version and entry[field["requires_grad"]] is False
            assert entry[field["stats"]] == expected[id(t)] and isinstance(entry[field["uid"]], int)
        for _ in range(2):
            torch.add(x, x)  # the compiled record's (its plan compiled at the first call)
        x * float("inf")  # the Python record's: an infinite scalar
        func = torch.ops.aten.add.Tensor
        compiled, plan = dict(zip(_native.COMPILED_PLAN_FIELDS, ops.compiled[id(func)])), ops.plans[id(func)]
        assert compiled == {"plan": plan, "op": func._op, "name": plan.name,
                            "written_positions": plan.written_positions, "wanted": plan.wanted,
                            "propagation": plan.native_propagation, "statistics": plan.statistics}
        assert compiled["plan"] is plan and compiled["op"] is func._op and ops.native.recorded == 2
    with open_trace(tmp_path / "trace") as trace:
        stages = trace.sql("SELECT op, stage FROM events ORDER BY seq")
    assert list(stages["op"]) == ["aten.add.Tensor"] * 2 + ["aten.mul.Tensor"]
    assert set(stages["stage"]) == {_native.UNLABELED_STAGE}


@needs_extension
def test_every_name_the_record_reads_is_on_what_it_reads_it_from(tmp_path):
    """record/reads.c's ATTRIBUTE_READS: (owner, name) for each name the C reads or sets off a
    Python object, checked on a real object of each owner; a rename on the Python side fails
    here instead of sending every op to the Python path or failing it."""
    neuron, t = LIF(), torch.ones(3)
    model = nn.Sequential(nn.Linear(4, 4), neuron)
    with Recorder(tmp_path / "trace", model=model) as recorder, recorder.stage("forward"):
        context = recorder.context
        owners = {
            "tensor": t, "storage": t.untyped_storage(), "context": context, "catalog": context.catalog,
            "tracker": context.tracker, "stage": context.current_stage, "module": model[0], "neuron": neuron,
            "lock": context.lock, "counter": PythonCounter(), "recorder": recorder.ops.native,
        }
        # a neuron is what the catalog marks stateful: the modules whose _memories the record reads
        assert context.catalog.ids[id(neuron)] in context.catalog.stateful
        assert context.catalog.ids[id(model[0])] not in context.catalog.stateful
        reads = _native.ATTRIBUTE_READS
        assert {owner for owner, _ in reads} == {*owners, "keyword"}
        missing = [(owner, name) for owner, name in reads if owner != "keyword" and not hasattr(owners[owner], name)]
        assert not missing, f"names the compiled record reads that are gone: {missing}"
    keywords = {name for owner, name in reads if owner == "keyword"}
    for op in (torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor, torch.ops.aten.rsub.Scalar):
        assert keywords <= {argument.name for argument in op._schema.arguments}, op
    assert ("tensor", "_version") in reads  # torch's own attribute, listed like the rest


def test_the_module_calls_its_parts_and_no_part_calls_back():
    """scan/module.c owns the table of the module's types: no other C file calls a function
    module.c defines (each type's file once called native_add_type there, which module.c's
    init called in turn: a circle)."""
    module = ROOT / "capture" / "native" / "scan" / "module.c"
    defined = {name for name, _ in c_functions(module.read_text())}
    callers = {f"{p.relative_to(ROOT)}: {name}" for p in C_FILES if p != module and p.suffix == ".c"
               for name in defined if re.search(rf"\b{name}\s*\(", p.read_text())}
    assert defined and not callers, callers
