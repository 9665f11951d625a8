"""Hardware presets: TOML data files with units and sources, validated against a model's keys.

A preset file has a `[preset]` table (name, model, description, source) and a
`[parameters]` tree whose numbers are `{ value = 2.5, unit = "pJ/bit" }`. Loading converts
every number to the unit the model declares for that key (`PRESET_UNITS` in the model's
module, fnmatch patterns allowed), so `fJ`, `nJ`, per-byte and per-bit energies, KiB and
bits all work; then the model's `Costs.from_values` turns the tree into its cost object.
Shipped presets live in analyze/presets/; `derive` applies `--set key=value` overrides.

Which models exist is the energy package's business, not this one's: every loader takes
`models`, a function from a model name to its module (PRESET_UNITS, Costs,
PRESET_ZERO_ALLOWED), and a loaded Preset keeps that module as its `spec`.
analyze.energy binds its registry (analyze.energy.load_preset), so presets never import
the models that import them.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from analyze.presets.units import NON_NUMBERS, convert, dimension

PRESET_DIR = Path(__file__).resolve().parent
ModelLookup = Callable[[str], Any]  # model name -> its module; raises PresetError when unknown

class PresetError(ValueError):
    """A preset file or override is malformed: the message names the file, the key and the problem."""


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

    def flat(self) -> dict[str, Any]:
        """Dotted key -> value, the keys `--set` and `recost(sweep=...)` take."""
        return dict(_flatten(self.parameters))

    def costs(self):
        """The model's cost object (validated)."""
        return _model_costs(self.spec, self.parameters, self._where())

    def to_json(self) -> dict:
        return {
            "name": self.name, "model": self.model, "description": self.description, "source": self.source,
            "path": str(self.path) if self.path else None, "overrides": self.overrides,
            "parameters": {k: {"value": v, "unit": self.units.get(k)} for k, v in self.flat().items()},
        }

    def derive(self, assignments: Mapping[str, Any] | list[str] | tuple[str, ...]) -> "Preset":
        """A copy with `assignments` applied: {"memory.sram.r_cost": 2.5} or ["memory.sram.r_cost=2.5"]
        (a value may carry a unit: "2.5 fJ/bit")."""
        pairs = _parse_assignments(assignments, self._where())
        parameters = json.loads(json.dumps(self.parameters))
        units = dict(self.units)
        schema = dict(self.spec.PRESET_UNITS)
        for key, raw in pairs.items():
            unit = _unit_for(key, schema, f"override {key}={raw}", self.flat())
            value = _override_value(raw, unit, key, self._where(), self.spec)
            _assign(parameters, key, value)
            units[key] = unit
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


def _unit_for(key: str, schema: Mapping[str, str], where: str, known: Mapping[str, Any] | None = None) -> str:
    """The unit of `key` by the model's schema; else an error naming `where` (the file, or the
    user's override) with the closest keys, so a typo is one glance from its fix."""
    for pattern, unit in schema.items():
        if fnmatch.fnmatchcase(key, pattern):
            return unit
    candidates = sorted(known) if known else sorted(schema)
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"known keys: {', '.join(candidates[:12])}" + (
        ", ..." if len(candidates) > 12 else "")
    raise PresetError(f"{where}: unknown key {key!r}; {hint}")


def _zero_allowed(key: str, spec) -> bool:
    """A model may list keys (fnmatch patterns) whose size can be 0, e.g. a breakpoint at 0 bytes."""
    patterns = getattr(spec, "PRESET_ZERO_ALLOWED", ()) if spec is not None else ()
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def _check_number(key: str, value: float, unit: str, where: str, spec=None) -> None:
    if not math.isfinite(value):
        raise PresetError(f"{where}: {key} = {value} is not finite")
    kind = dimension(unit)[0] if unit not in NON_NUMBERS else ""
    if kind.startswith("energy") and value < 0:
        raise PresetError(f"{where}: {key} = {value} {unit}: an energy cannot be negative")
    if kind in ("size", "size/cycle", "size/time", "frequency") and value == 0 and _zero_allowed(key, spec):
        return
    if kind in ("size", "size/cycle", "size/time", "frequency") and value <= 0:
        raise PresetError(f"{where}: {key} = {value} {unit}: a size, bandwidth or frequency must be positive")
    if value < 0 and kind in ("area", "time", "time/cycle"):
        raise PresetError(f"{where}: {key} = {value} {unit} cannot be negative")


def _normalise(tree: Mapping, schema: Mapping[str, str], where: str, prefix: str = "",
               spec=None) -> tuple[dict, dict]:
    """Strip {value, unit} leaves to numbers in the schema's units; returns (tree, units)."""
    out, units = {}, {}
    for key, item in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(item, Mapping) and "value" not in item:
            out[key], sub_units = _normalise(item, schema, where, dotted + ".", spec)
            units.update(sub_units)
            continue
        unit = _unit_for(dotted, schema, where)
        if isinstance(item, Mapping):
            extra = set(item) - {"value", "unit"}
            if extra or "unit" not in item:
                raise PresetError(f"{where}: {dotted} must be {{ value = ..., unit = \"{unit}\" }}, got keys {sorted(item)}")
            value, given = item["value"], item["unit"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise PresetError(f"{where}: {dotted} value {value!r} is not a number")
            try:
                number = convert(float(value), str(given), unit)
            except ValueError as problem:
                raise PresetError(f"{where}: {dotted}: {problem}") from None
            _check_number(dotted, number, unit, where, spec)
            out[key] = int(number) if isinstance(value, int) and number == int(number) and unit == given else number
        elif unit in NON_NUMBERS:
            if unit == "bool" and not isinstance(item, bool):
                raise PresetError(f"{where}: {dotted} must be true or false, got {item!r}")
            out[key] = item
        else:
            raise PresetError(f"{where}: {dotted} = {item!r} needs its unit: {{ value = {item!r}, unit = \"{unit}\" }}")
        units[dotted] = unit
    return out, units


def _model_costs(spec, parameters: Mapping, where: str):
    try:
        return spec.Costs.from_values(parameters)
    except PresetError:
        raise
    except (ValueError, TypeError) as problem:
        raise PresetError(f"{where}: {problem}") from None


def parse_preset(document: Mapping, where: str, path: Path | None = None, *, models: ModelLookup) -> Preset:
    head = document.get("preset")
    if not isinstance(head, Mapping):
        raise PresetError(f"{where}: missing [preset] table (name, model, description, source)")
    missing = [k for k in ("name", "model", "source") if not head.get(k)]
    if missing:
        raise PresetError(f"{where}: [preset] lacks {', '.join(missing)}")
    extra = set(document) - {"preset", "parameters"}
    if extra:
        raise PresetError(f"{where}: unknown top-level table(s) {sorted(extra)}; expected [preset] and [parameters]")
    try:
        spec = models(str(head["model"]))
    except PresetError as problem:
        raise PresetError(f"{where}: {problem}") from None
    parameters, units = _normalise(document.get("parameters", {}), dict(spec.PRESET_UNITS), where, spec=spec)
    preset = Preset(str(head["name"]), str(head["model"]), str(head.get("description", "")), str(head["source"]),
                    parameters, units, path, spec=spec)
    preset.costs()
    return preset


def read_preset_file(path: str | Path, *, models: ModelLookup) -> Preset:
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PresetError(f"{path}: no such preset file") from None
    except tomllib.TOMLDecodeError as problem:
        raise PresetError(f"{path}: not valid TOML: {problem}") from None
    return parse_preset(document, str(path), path, models=models)


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


def _parse_assignments(assignments, where: str) -> dict[str, Any]:
    if isinstance(assignments, Mapping):
        return dict(assignments)
    pairs = {}
    for text in assignments:
        key, sep, value = str(text).partition("=")
        if not sep or not key.strip():
            raise PresetError(f"{where}: override {text!r} is not KEY=VALUE")
        pairs[key.strip()] = value.strip()
    return pairs


def _override_value(raw, unit: str, key: str, where: str, spec=None):
    if unit in NON_NUMBERS:
        if unit == "bool":
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("true", "false"):
                return str(raw).lower() == "true"
            raise PresetError(f"{where}: {key} must be true or false, got {raw!r}")
        return str(raw)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        number, given = float(raw), unit
    else:
        text = str(raw).strip()
        number_text, _, given = text.partition(" ")
        try:
            number = float(number_text)
        except ValueError:
            raise PresetError(f"{where}: {key} = {raw!r} is not a number (unit {unit})") from None
        given = given.strip() or unit
    try:
        value = convert(number, given, unit)
    except ValueError as problem:
        raise PresetError(f"{where}: {key}: {problem}") from None
    _check_number(key, value, unit, where, spec)
    return value
