"""Hypothesis-driven mutations of the shipped presets: every malformed preset is
refused with a PresetError whose lines each name the file (or the override) and one names
the key; a mutation that keeps the preset's meaning (an equivalent unit, keys left to an
`inherits` parent) loads with the numbers unchanged. No other outcome: no other exception
type, no preset accepted with other numbers.

The mutations: drop a table or key; give a value another type; non-finite, huge and negative
numbers; malformed, foreign and wrong-dimension units; a non-ASCII digit in a number; deep
nesting (dotted keys and arrays); bad choices (unknown, duplicated or missing levels); unknown
keys; the same through `--set` overrides. Seeded (derandomize) and sampled: about 500 cases,
a few seconds. The counts are printed (pytest -s) and recorded as the test's
`presets_fuzz` property (junit XML).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spiketrace.analyze.energy import PresetError, load_preset, read_preset_file
from spiketrace.analyze.presets import PRESET_DIR, shipped_presets
from spiketrace.analyze.presets.provenance import KEYS as PROVENANCE_KEYS
from spiketrace.analyze.presets.provenance import REQUIRED_FOR as REQUIRED_PROVENANCE
from spiketrace.analyze.presets.ranges import CHOICES, RANGES, REQUIRED
from spiketrace.analyze.presets.units import dimension

SHIPPED = sorted(shipped_presets())
DOCUMENTS = {name: tomllib.loads((PRESET_DIR / f"{name}.toml").read_text()) for name in SHIPPED}
ORIGINAL = {name: load_preset(name) for name in SHIPPED}
FILE_KINDS = ("drop", "wrong type", "non-finite", "huge", "negative", "bad unit", "non-ascii digit",
              "deep nesting", "bad choice", "unknown key", "equivalent unit", "inherit what was dropped")
KEEPS_MEANING = ("equivalent unit", "inherit what was dropped")
EXAMPLES = 420
OVERRIDE_EXAMPLES = 120
OTHER_DIGITS = (0x0660, 0x0966, 0xFF10, 0x1D7CE)  # Arabic-Indic, Devanagari, fullwidth, mathematical bold
EQUIVALENT = {"pJ": ("fJ", 1e3), "nJ": ("pJ", 1e3), "bit": ("byte", 1 / 8), "byte": ("bit", 8), "pJ/byte": ("pJ/bit", 1 / 8),
              "pJ/bit": ("pJ/byte", 8), "um2": ("mm2", 1e-6), "MHz": ("GHz", 1e-3), "um2/bit": ("um2/byte", 8)}


class Raw(str):
    """TOML text written as it is (numbers TOML cannot express, nesting, foreign digits)."""


# -- a small TOML writer: [preset], then [parameters] as dotted keys ------------------------------

def _key(key) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", str(key)) else json.dumps(str(key), ensure_ascii=False)


def _value(value) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"


def _lines(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        dotted = f"{prefix}{_key(key)}"
        if isinstance(value, dict) and value and "value" not in value and "unit" not in value:
            yield from _lines(value, dotted + ".")
        else:
            yield f"{dotted} = {_value(value)}"


def toml_text(document: dict) -> str:
    top = [f"{_key(k)} = {_value(v)}" for k, v in document.items() if not isinstance(v, dict)]
    sections = [f"\n[{_key(k)}]\n" + "\n".join(_lines(v)) for k, v in document.items() if isinstance(v, dict)]
    return "\n".join(top) + "\n" + "\n".join(sections) + "\n"


# -- where a mutation can land -------------------------------------------------------------------

def _paths(tree, prefix=()):
    """Every (path, value) below `tree`: tables, {value, unit} leaves and plain values."""
    for key, value in tree.items():
        path = (*prefix, key)
        yield path, value
        if isinstance(value, dict) and "value" not in value:
            yield from _paths(value, path)


def _get(document, path):
    for part in path:
        document = document[part]
    return document


def _set(document, path, value):
    _get(document, path[:-1])[path[-1]] = value


def _drop(document, path):
    del _get(document, path[:-1])[path[-1]]


def _numbers(document):
    return [p for p, v in _paths(document.get("parameters", {}), ("parameters",))
            if isinstance(v, dict) and "value" in v]


def _droppable(name, document):
    """Paths whose removal makes the preset malformed: all but lemaire's last breakpoint (a
    curve with fewer points is another valid preset, not a malformed one), a flat parameter the
    model does not require (a chip's figure it does not give: another valid preset) and a
    provenance key the model does not require (provenance.py)."""
    model = ORIGINAL[name].model
    points = sorted(document["parameters"].get("memory_breakpoints", {}), key=lambda p: int(p[1:]))
    last = ("parameters", "memory_breakpoints", points[-1]) if points else None
    optional = {("parameters", key) for key in RANGES.get(model, {}) if "." not in key and key not in REQUIRED.get(model, ())}
    optional |= {("preset", key) for key in PROVENANCE_KEYS if key not in REQUIRED_PROVENANCE.get(model, ())}
    return [p for p, _ in _paths(document) if (last is None or p[:3] != last) and p[:2] not in optional]


@dataclass
class Case:
    preset: str
    kind: str
    key: str  # the dotted key (or table) mutated, as messages name it
    text: str = ""  # the mutated file
    overrides: object = None  # or the overrides applied to the shipped preset


def _dotted(path) -> str:
    return ".".join(map(str, path[1:] if path[0] == "parameters" and len(path) > 1 else path))


def _digits(text: str, block: int) -> str:
    return "".join(chr(block + int(c)) if c.isdigit() and c.isascii() else c for c in text)


@st.composite
def file_cases(draw) -> Case:
    name = draw(st.sampled_from(SHIPPED))
    kind = draw(st.sampled_from(FILE_KINDS))
    document = json.loads(json.dumps(DOCUMENTS[name]))
    numbers = _numbers(document)
    if kind == "drop":
        path = draw(st.sampled_from(_droppable(name, document)))
        _drop(document, path)
    elif kind == "wrong type":
        path = draw(st.sampled_from([p for p, _ in _paths(document)]))
        old = _get(document, path)
        if isinstance(old, dict) and "value" in old:
            options = ["1.5", True, [1, 2], 1.5, {}, {"value": 1}]
        elif isinstance(old, dict):
            options = [5, "a table", [1, 2], True]
        elif isinstance(old, bool):
            options = ["true", 1, [True], {"value": True, "unit": "bool"}]
        elif isinstance(old, list):
            options = ["dram", 5, {"a": 1}, [1, 2]]
        else:
            options = [5, True, [old], {"value": 1, "unit": "1"}]
        _set(document, path, draw(st.sampled_from(options)))
    elif kind in ("non-finite", "huge", "negative", "non-ascii digit", "bad unit", "equivalent unit"):
        if kind == "equivalent unit":
            numbers = [p for p in numbers if _get(document, p)["unit"] in EQUIVALENT]
        assume(numbers)  # a preset with no number (of a unit EQUIVALENT knows): another case
        path = draw(st.sampled_from(numbers))
        leaf = _get(document, path)
        if kind == "non-finite":
            leaf["value"] = draw(st.sampled_from([math.inf, -math.inf, math.nan]))
        elif kind == "huge":
            leaf["value"] = draw(st.sampled_from([1e20, 1e300, -1e300, 2**70, Raw("1" + "0" * 400), Raw("1e400"),
                                                   Raw("9" * 5000)]))
        elif kind == "negative":
            leaf["value"] = -(abs(leaf["value"]) + draw(st.sampled_from([1, 0.5, 1e-9])))
        elif kind == "non-ascii digit":
            text = _value(leaf["value"])
            leaf["value"] = Raw(_digits(text, draw(st.sampled_from(OTHER_DIGITS))))
        elif kind == "bad unit":
            wrong = "ns" if dimension(leaf["unit"])[0] != "time" else "pJ"
            leaf["unit"] = draw(st.sampled_from(["pJ/", leaf["unit"] + "/", " " + leaf["unit"], "p J", "",
                                                 "ｐJ", "parsec", 5, wrong]))
        else:
            unit, factor = EQUIVALENT[leaf["unit"]]
            leaf["unit"], leaf["value"] = unit, leaf["value"] * factor
    elif kind == "deep nesting":
        depth = draw(st.integers(9, 3000))
        if draw(st.booleans()):
            chain = ".".join(["deep"] * depth)
            text = toml_text(document).replace("\n[parameters]\n", f"\n[parameters]\n{chain} = 1\n", 1)
            return Case(name, kind, "deep", text=text)
        path = draw(st.sampled_from([p for p, _ in _paths(document["parameters"], ("parameters",))]))
        _set(document, path, Raw("[" * depth + "]" * depth))
    elif kind == "bad choice":
        choices = [k for k in CHOICES.get(ORIGINAL[name].model, {}) if _exists(document, ("parameters", *k.split(".")))]
        key = draw(st.sampled_from(sorted(choices))) if choices else "level_order"
        if key == "level_order":
            value = draw(st.sampled_from([[], ["dram", "dram", "sram", "reg", "noc"], ["dram", "sram", "reg"],
                                          ["dram", "sram", "reg", "noc", "l3"], ["DRAM", "sram", "reg", "noc"]]))
        else:
            value = draw(st.sampled_from(["", "flash", "Dense", "old ", "sram\x00", "qualia\x1b[2J"]))
        _set(document, ("parameters", *key.split(".")), value)
        return Case(name, kind, key, text=toml_text(document))
    elif kind == "unknown key":
        tables = [p for p, v in _paths(document) if isinstance(v, dict) and "value" not in v]
        path = draw(st.sampled_from([(), *tables]))
        new = (*path, "zz_unknown")
        _set(document, new, {"value": 1, "unit": "pJ"} if path else {"x": 1})
        return Case(name, kind, _dotted(new) if path else "zz_unknown", text=toml_text(document))
    else:  # inherit what was dropped: the parent fills in exactly what the child lacks
        paths = [p for p, _ in _paths(document["parameters"], ("parameters",))]
        for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=4, unique=True)):
            if _exists(document, path):
                _drop(document, path)
        if draw(st.booleans()) and draw(st.booleans()):
            del document["parameters"]
        document["preset"]["inherits"] = name
        return Case(name, kind, "inherits", text=toml_text(document))
    return Case(name, kind, _dotted(path), text=toml_text(document))


def _exists(document, path) -> bool:
    try:
        _get(document, path)
    except (KeyError, TypeError):
        return False
    return True


@st.composite
def override_cases(draw) -> Case:
    name = draw(st.sampled_from(SHIPPED))
    preset = ORIGINAL[name]
    key = draw(st.sampled_from(sorted(k for k, u in preset.units.items() if u not in ("str", "bool"))))
    raw = draw(st.sampled_from(["inf", "-inf", "nan", "1e400", "1e308", "-1", "١٢", "３", "1_000", "0x10",
                                "1.5.2", "½", "Infinity", "", "1e5 pJ/", "3 parsec", "3 ns", "2 p J", 10**400,
                                float("nan"), -1e300]))
    return Case(name, "override", key, overrides={key: raw} if not isinstance(raw, str) else [f"{key}={raw}"])


# -- the oracle ----------------------------------------------------------------------------------

def _same(loaded, original) -> bool:
    ours, theirs = loaded.flat(), original.flat()
    return ours.keys() == theirs.keys() and all(
        (ours[k] == pytest.approx(theirs[k], rel=1e-12)) if isinstance(theirs[k], float) else ours[k] == theirs[k]
        for k in theirs)


def outcome(case: Case, path) -> tuple[str, str]:
    """("rejected" | "unchanged" | another outcome, details)."""
    try:
        if case.overrides is not None:
            loaded = load_preset(case.preset, case.overrides)
        else:
            path.write_text(case.text, encoding="utf-8")
            loaded = read_preset_file(path)
    except PresetError as error:
        lines = error.problems
        where = f"override {case.key}=" if case.overrides is not None else str(path)
        if not lines or str(error) != "\n".join(lines) or any("\n" in line for line in lines):
            return "malformed error", str(error)
        if not all(line.startswith(where) for line in lines):
            return "error not naming the file", str(error)
        parts = case.key.split(".")
        names = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}  # the key, or a table holding it
        if not any(re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", line.removeprefix(where)) for n in names
                   for line in lines):
            return "error not naming the key", str(error)
        return "rejected", ""
    except Exception as error:  # noqa: BLE001 - the point: no other exception type
        return f"other exception {type(error).__name__}", str(error)[:300]
    if case.kind in KEEPS_MEANING and _same(loaded, ORIGINAL[case.preset]):
        return "unchanged", ""
    return "accepted with other numbers", json.dumps({k: str(v) for k, v in loaded.flat().items()})[:300]


def test_mutated_presets_are_refused_naming_file_and_key_or_load_unchanged(tmp_path, record_property):
    path = tmp_path / "mutated.toml"
    tally, by_kind, failures = Counter(), Counter(), []

    def run(case: Case) -> None:
        result, details = outcome(case, path)
        tally[result] += 1
        by_kind[case.kind, result] += 1
        if result not in ("rejected", "unchanged") or (result == "unchanged") != (case.kind in KEEPS_MEANING):
            failures.append((case.preset, case.kind, case.key, result, details, case.text[:2000]))

    common = dict(derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    given(file_cases())(settings(max_examples=EXAMPLES, **common)(lambda case: run(case)))()
    given(override_cases())(settings(max_examples=OVERRIDE_EXAMPLES, **common)(lambda case: run(case)))()

    tried = sum(tally.values())
    summary = {"tried": tried, "rejected": tally["rejected"], "unchanged": tally["unchanged"],
               "other outcomes": tried - tally["rejected"] - tally["unchanged"],
               "by kind": {f"{kind}: {result}": n for (kind, result), n in sorted(by_kind.items())}}
    record_property("presets_fuzz", json.dumps(summary))
    print(f"\npresets fuzz: {json.dumps(summary, indent=1)}")
    assert not failures, "\n\n".join(map(str, failures[:5]))
    assert summary["other outcomes"] == 0
    assert tried >= 0.9 * (EXAMPLES + OVERRIDE_EXAMPLES)
    assert {kind for kind, _ in by_kind} == {*FILE_KINDS, "override"}  # every mutation was tried
