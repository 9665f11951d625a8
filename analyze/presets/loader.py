"""Hardware presets: TOML data files with units and sources, validated against a model's keys.

A preset file has a `[preset]` table (name, model, description, source; optionally
`inherits`; grade, basis, node, voltage, scope and rows: provenance.py, required of a chip
preset) and a `[parameters]` tree whose numbers are `{ value = 2.5, unit = "pJ/bit" }`.
Loading converts every number to the unit the model declares for that key (`PRESET_UNITS` in
the model's module, fnmatch patterns allowed), so `fJ`, `nJ`, per-byte and per-bit energies,
KiB and bits all work; then checks it against the model's declared ranges, choices and
required keys (ranges.py, checks.py); then the model's `Costs.from_values` turns the tree
into its cost object. Shipped presets live in analyze/presets/; `derive` applies `--set
key=value` overrides, checked the same way.

Nothing is filled in silently: a preset gives every key its model requires, or says
`inherits = "neuromc-like-v1"` (a shipped name, or a TOML path relative to the file) in
[preset], and the parent's parameters are merged under its own (its values win, table by
table). Every problem found is reported at once: a PresetError holds one line per problem,
each naming the file (or the override) and the key.

Which models exist is the energy package's business, not this one's: every loader takes
`models`, a function from a model name to its module (PRESET_UNITS, Costs,
PRESET_ZERO_ALLOWED), and a loaded Preset keeps that module as its `spec`.
spiketrace.analyze.energy binds its registry (spiketrace.analyze.energy.load_preset), so presets never import
the models that import them.
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spiketrace.analyze.presets.checks import (
    PresetError,
    brief,
    match,
    number_problems,
    plain_value_problems,
    required_problems,
    shown,
    too_deep,
)
from spiketrace.analyze.presets.files import read_document
from spiketrace.analyze.presets.overrides import override_value, parse_assignments, shown_raw
from spiketrace.analyze.presets.provenance import KEYS as PROVENANCE_KEYS
from spiketrace.analyze.presets.provenance import provenance, provenance_problems
from spiketrace.analyze.presets.units import NON_NUMBERS, convert

PRESET_DIR = Path(__file__).resolve().parent
ModelLookup = Callable[[str], Any]  # model name -> its module; raises PresetError when unknown
MAX_INHERITANCE = 8
HEAD_KEYS = ("name", "model", "description", "source")


@dataclass(frozen=True)
class Preset:
    """A loaded, unit-normalised preset. `parameters` is the nested tree the model reads."""

    name: str
    model: str
    description: str
    source: str
    parameters: dict
    units: dict[str, str] = field(default_factory=dict)  # dotted key -> unit of its value
    path: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    spec: Any = field(default=None, compare=False, repr=False)  # the model's module (units, Costs)
    inherits: str | None = None  # the parent preset named in [preset], whose parameters are merged in
    provenance: dict[str, str] = field(default_factory=dict)  # grade, basis, node, voltage, scope (provenance.py)

    def flat(self) -> dict[str, Any]:
        """Dotted key -> value, the keys `--set` and `recost(sweep=...)` take."""
        return dict(_flatten(self.parameters))

    def costs(self):
        """The model's cost object (validated)."""
        return _model_costs(self.spec, self.parameters, self._where())

    def to_json(self) -> dict:
        return {
            "name": self.name, "model": self.model, "description": self.description, "source": self.source,
            "path": str(self.path) if self.path else None, "inherits": self.inherits, "overrides": self.overrides,
            "provenance": dict(self.provenance),
            "parameters": {k: {"value": v, "unit": self.units.get(k)} for k, v in self.flat().items()},
        }

    def derive(self, assignments: Mapping[str, Any] | list[str] | tuple[str, ...]) -> Preset:
        """A copy with `assignments` applied: {"memory.sram.r_cost": 2.5} or ["memory.sram.r_cost=2.5"]
        (a value may carry a unit: "2.5 fJ/bit"). Every bad assignment is reported at once."""
        pairs = parse_assignments(assignments, self._where())
        parameters = copy.deepcopy(self.parameters)
        units = dict(self.units)
        schema = dict(self.spec.PRESET_UNITS)
        problems: list[str] = []
        known = self.flat()
        for key, raw in pairs.items():
            label = f"override {key}={shown_raw(raw)}"
            try:
                unit = _unit_for(key, schema, label, known)
            except PresetError as problem:
                problems += problem.problems
                continue
            value, found = override_value(raw, unit, key, self.model, self.spec)
            if found:
                problems += [f"{label}: {line}" for line in found]
                continue
            try:
                _assign(parameters, key, value)
            except PresetError as problem:
                problems.append(f"{label}: {problem}")
                continue
            units[key] = unit
        if not problems:
            problems = [f"{self._where()} with overrides: {line}" for line in required_problems(self.model, parameters)]
        if problems:
            raise PresetError(problems)
        derived = replace(self, parameters=parameters, units=units, overrides={**self.overrides, **pairs})
        derived.costs()  # validate now, naming the key
        return derived

    def _where(self) -> str:
        return str(self.path) if self.path else f"preset {self.name!r}"


def _flatten(tree: Mapping, prefix: str = ""):
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, value


def _assign(tree: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
        if not isinstance(tree, dict):
            raise PresetError(f"{dotted}: {part} is a value, not a table")
    tree[last] = value


def _is_table(key: str, schema: Mapping[str, str]) -> bool:
    """Whether the schema has keys below `key` (memory_instances.reg_1b for memory_instances.*.r_cost)."""
    parts = key.split(".")
    return any(len(pattern) > len(parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pattern))
               for pattern in (p.split(".") for p in schema))


def _unit_for(key: str, schema: Mapping[str, str], where: str, known: Mapping[str, Any] | None = None) -> str:
    """The unit of `key` by the model's schema; else an error naming `where` (the file, or the
    user's override) with the closest keys, so a typo is one glance from its fix."""
    pattern = match(key, schema)
    if pattern is not None:
        return schema[pattern]
    if _is_table(key, schema):
        raise PresetError(f"{where}: {key} must be a table, not a value")
    candidates = sorted(known) if known else sorted(schema)
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known keys: {', '.join(candidates[:12])}" + (
        ", ..." if len(candidates) > 12 else "")
    raise PresetError(f"{where}: unknown key {key!r}; {hint}")


def _unknown(key: str, schema: Mapping[str, str], where: str) -> list[str]:
    try:
        _unit_for(key, schema, where)
    except PresetError as problem:
        return problem.problems
    return []


def _leaf(dotted: str, item: Mapping, unit: str, model: str, spec) -> tuple[Any, list[str]]:
    """A `{ value, unit }` leaf as (the number in the model's `unit`, its problems)."""
    extra = set(item) - {"value", "unit"}
    if extra or "unit" not in item or "value" not in item:
        return None, [f"{dotted} must be {{ value = ..., unit = \"{unit}\" }}, got keys {sorted(map(str, item))}"]
    value, given = item["value"], item["unit"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, [f"{dotted} value {brief(value)} is not a number"]
    if not isinstance(given, str):
        return None, [f"{dotted}: unit {brief(given)} is not a string"]
    try:
        number = convert(float(value), given, unit)
    except OverflowError:  # an integer beyond a float's range
        return None, [f"{dotted} = an integer of {int(int(value).bit_length() * 0.30103) + 1} digits: not a finite number"]
    except ValueError as problem:
        return None, [f"{dotted}: {problem}"]
    label = f"{dotted} = {shown(value, given)}" + (f" ({shown(number, unit)})" if given != unit else "")
    found = number_problems(dotted, number, unit, model, spec, label)
    if found:
        return None, found
    return (int(number) if isinstance(value, int) and unit == given else number), []


def _normalise(tree: Mapping, schema: Mapping[str, str], where: str, model: str, spec,
               prefix: str = "") -> tuple[dict, dict, list[str]]:
    """Strip {value, unit} leaves to numbers in the schema's units; (tree, units, problems)."""
    out, units, problems = {}, {}, []
    for key, item in tree.items():
        dotted = f"{prefix}{key}"
        pattern = match(dotted, schema)
        if isinstance(item, Mapping) and "value" not in item and pattern is None:
            if not _is_table(dotted, schema):
                problems += _unknown(dotted, schema, where)
                continue
            out[key], sub_units, found = _normalise(item, schema, where, model, spec, dotted + ".")
            units.update(sub_units)
            problems += found
            continue
        if pattern is None:
            problems += _unknown(dotted, schema, where)
            continue
        unit = schema[pattern]
        if unit in NON_NUMBERS:
            value, found = item, plain_value_problems(dotted, item, unit, model)
        elif isinstance(item, Mapping):
            value, found = _leaf(dotted, item, unit, model, spec)
        else:
            value, found = None, [f"{dotted} = {brief(item)} needs its unit: {{ value = {brief(item)}, unit = \"{unit}\" }}"]
        problems += [f"{where}: {line}" for line in found]
        if not found:
            out[key], units[dotted] = value, unit
    return out, units, problems


def _model_costs(spec, parameters: Mapping, where: str):
    try:
        return spec.Costs.from_values(parameters)
    except PresetError:
        raise
    except (ValueError, TypeError, KeyError, ArithmeticError) as problem:
        raise PresetError(f"{where}: {problem}") from None


def _head(document: Mapping, where: str) -> tuple[dict, list[str]]:
    """The [preset] table's fields and the problems of the document's top level."""
    problems = [f"{where}: unknown top-level table(s) {sorted(map(str, extra))}; expected [preset] and [parameters]"
                for extra in [set(document) - {"preset", "parameters"}] if extra]
    head = document.get("preset")
    if not isinstance(head, Mapping):
        return {}, problems + [f"{where}: missing [preset] table (name, model, description, source)"]
    missing = [k for k in HEAD_KEYS if k not in head or head[k] == ""]
    if missing:
        problems.append(f"{where}: [preset] lacks {', '.join(missing)}")
    for key in sorted(set(head) - {*HEAD_KEYS, "inherits", *PROVENANCE_KEYS}, key=str):
        problems.append(f"{where}: [preset] {key}: unknown key (known: {', '.join((*HEAD_KEYS, *PROVENANCE_KEYS))}, "
                        "inherits)")
    model = head.get("model")
    problems += provenance_problems(head, model if isinstance(model, str) else None, where)
    for key in (*HEAD_KEYS, "inherits"):
        if key in head and not isinstance(head[key], str):
            problems.append(f"{where}: [preset] {key} = {brief(head[key])}: must be a string")
    if "parameters" not in document and "inherits" not in head:
        problems.append(f"{where}: missing [parameters] table (or inherits = \"PRESET\" in [preset])")
    elif not isinstance(document.get("parameters", {}), Mapping):
        problems.append(f"{where}: parameters must be a table, got {brief(document['parameters'])}")
    return dict(head), problems


def _merge(base: Mapping, top: Mapping) -> dict:
    """`top` over `base`, table by table ({value, unit} leaves and other values replace)."""
    merged = dict(base)
    for key, value in top.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and "value" not in value and isinstance(below, Mapping) and "value" not in below:
            merged[key] = _merge(below, value)
        else:
            merged[key] = value
    return merged


def _parent_parameters(name: str, model: str, where: str, path: Path | None, models: ModelLookup,
                       chain: tuple[Path, ...]) -> tuple[Mapping, list[str]]:
    """The raw (unit-carrying) parameters of the parent `name`, its own parents merged in."""
    shipped = shipped_presets()
    parent = shipped.get(name) or ((path.parent if path else Path.cwd()) / name)
    if name not in shipped and parent.suffix != ".toml":
        return {}, [f"{where}: [preset] inherits = {brief(name)}: not a shipped preset ({', '.join(shipped)}) "
                    "nor a .toml file"]
    parent = parent.resolve()
    if parent in chain:
        return {}, [f"{where}: [preset] inherits = {brief(name)}: a cycle ({' -> '.join(p.name for p in (*chain, parent))})"]
    if len(chain) > MAX_INHERITANCE:
        return {}, [f"{where}: [preset] inherits = {brief(name)}: more than {MAX_INHERITANCE} levels of inheritance"]
    loaded, raw = _read(parent, models, (*chain, parent))
    if loaded.model != model:
        return {}, [f"{where}: [preset] inherits = {brief(name)}: a {loaded.model} preset, not {model}"]
    return raw, []


def _parse(document: Mapping, where: str, path: Path | None, models: ModelLookup,
           chain: tuple[Path, ...]) -> tuple[Preset, Mapping]:
    """The Preset of `document`, and its raw parameters with the inherited ones merged in."""
    deep = [line for key, value in document.items()  # keys named as elsewhere: [parameters]' own bare
            for line in too_deep(value, where, "" if key == "parameters" else str(key))]
    if deep:  # before anything shows a value
        raise PresetError(deep)
    head, problems = _head(document, where)
    spec = None
    if isinstance(head.get("model"), str) and head["model"]:
        try:
            spec = models(head["model"])
        except PresetError as problem:
            problems.append(f"{where}: {problem}")
    raw = document.get("parameters", {})
    if problems or spec is None:
        raise PresetError(problems)
    model, inherits = head["model"], head.get("inherits")
    if inherits:
        inherited, found = _parent_parameters(inherits, model, where, path, models, chain)
        if found:
            raise PresetError(found)
        raw = _merge(inherited, raw)
    parameters, units, problems = _normalise(raw, dict(spec.PRESET_UNITS), where, model, spec)
    problems += [f"{where}: {line}" for line in required_problems(model, raw)]  # present, if malformed
    if problems:
        raise PresetError(problems)
    preset = Preset(head["name"], model, head["description"], head["source"], parameters, units, path, spec=spec,
                    inherits=inherits, provenance=provenance(head))
    preset.costs()
    return preset, raw


def _read(path: Path, models: ModelLookup, chain: tuple[Path, ...]) -> tuple[Preset, Mapping]:
    return _parse(read_document(path), str(path), path, models, chain)


def read_preset_file(path: str | Path, *, models: ModelLookup) -> Preset:
    path = Path(path)
    return _read(path, models, (path.resolve(),))[0]


def shipped_presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.toml"))}


def load_preset(preset: str | Path | Preset, overrides=(), *, models: ModelLookup) -> Preset:
    """A shipped preset by name, a preset file by path, or a Preset; then `overrides` applied."""
    if isinstance(preset, Preset):
        loaded = preset
    else:
        shipped = shipped_presets()
        if str(preset) in shipped:
            loaded = read_preset_file(shipped[str(preset)], models=models)
        elif Path(preset).suffix == ".toml" or Path(preset).exists():
            loaded = read_preset_file(preset, models=models)
        else:
            raise PresetError(f"unknown preset {str(preset)!r}: not a shipped preset ({', '.join(shipped)}) nor a file")
    return loaded.derive(overrides) if overrides else loaded


def list_presets(*, models: ModelLookup) -> list[Preset]:
    return [read_preset_file(path, models=models) for path in shipped_presets().values()]
