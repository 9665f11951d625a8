"""The checks a preset's values go through, by the data of ranges.py: each returns the
problems it finds (one line each, naming the file or override and the key), never raises,
so the loader can list every problem of a preset at once.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from typing import Any

from spiketrace.analyze.presets.ranges import CHOICES, FALLBACK_LIMIT, RANGES, REQUIRED, REQUIRED_WHEN
from spiketrace.analyze.presets.units import dimension


class PresetError(ValueError):
    """A preset file or override is malformed. `problems` holds one line per problem, each
    naming the file (or the override) and the key; the message is those lines."""

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems) or ["malformed preset"]
        super().__init__("\n".join(self.problems))


MAX_DEPTH = 8  # tables and arrays below [parameters]; the deepest shipped key has 4
# A number written in an override: ASCII digits only (float() would take '١٫٥', '1_0', 'inf').
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def match(key: str, patterns) -> str | None:
    """The pattern of `patterns` (an exact key first, else the first fnmatch) that `key` matches."""
    if key in patterns:
        return key
    return next((p for p in patterns if fnmatch.fnmatchcase(key, p)), None)


def too_deep(tree: Any, where: str, prefix: str = "", limit: int = MAX_DEPTH) -> list[str]:
    """The first path nested deeper than `limit` tables or arrays (found without recursion)."""
    stack = [(tree, prefix, 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > limit:
            return [f"{where}: {path or 'parameters'}: nested deeper than {limit} levels"]
        if isinstance(node, Mapping):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))
    return []


def parse_number(text: str) -> float | None:
    """`text` as a finite-or-not float when it is written in ASCII decimal notation, else None."""
    return float(text) if _NUMBER.fullmatch(text) else None


def brief(value: Any, limit: int = 80) -> str:
    """`repr(value)` for a message, cut at `limit` characters (a value may be nested or huge)."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested beyond the stack, or an integer of > 4300 digits
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def shown(value: float, unit: str = "") -> str:
    """A number for a message: as written when short (-1.0, 0.0001), else 6 digits (1e+12); then its unit."""
    compact = f"{value:.6g}"
    text = compact if "e" in compact or "n" in compact else str(value)
    return f"{text} {unit}" if unit and unit != "1" else text


def number_problems(key: str, value: float, unit: str, model: str, spec=None, label: str | None = None) -> list[str]:
    """`value` (already in the model's `unit`) against the range declared for `key`.
    `label` is what the message starts with (default `key = value unit`)."""
    label = label or f"{key} = {shown(value, unit)}"
    if not math.isfinite(value):
        return [f"{label}: not a finite number"]
    ranges = RANGES.get(model, {})
    pattern = match(key, ranges)
    if pattern is None:
        return _fallback(key, value, unit, label, spec)
    low, high, whole = ranges[pattern]
    kind = dimension(unit)[0]
    problems = []
    if value < low:
        problems.append(f"{label}: an energy cannot be negative" if kind.startswith("energy") and value < 0 and low == 0
                        else f"{label}: below the minimum {shown(low, unit)}")
    elif value > high:
        problems.append(f"{label}: above the maximum {shown(high, unit)}")
    if whole and value != math.floor(value):
        problems.append(f"{label}: must be a whole number" + (f" of {unit}" if unit != "1" else ""))
    return problems


def _fallback(key: str, value: float, unit: str, label: str, spec) -> list[str]:
    """A key without a declared range: the checks by dimension, and a bound on the magnitude."""
    kind = dimension(unit)[0]
    zero_allowed = any(fnmatch.fnmatchcase(key, p) for p in getattr(spec, "PRESET_ZERO_ALLOWED", ()))
    if abs(value) > FALLBACK_LIMIT:
        return [f"{label}: above the limit {shown(FALLBACK_LIMIT)} for a key without a declared range"]
    if kind.startswith("energy") and value < 0:
        return [f"{label}: an energy cannot be negative"]
    if kind in ("size", "size/cycle", "size/time", "frequency") and (value < 0 or (value == 0 and not zero_allowed)):
        return [f"{label}: a size, bandwidth or frequency must be positive"]
    if value < 0 and kind in ("area", "time", "time/cycle", "length"):
        return [f"{label}: cannot be negative"]
    return []


def plain_value_problems(key: str, value: Any, unit: str, model: str) -> list[str]:
    """A `str` or `bool` key's value: its type, and its choices when declared."""
    if unit == "bool":
        return [] if isinstance(value, bool) else [f"{key} = {brief(value)}: must be true or false"]
    choice = CHOICES.get(model, {}).get(key)
    if choice is None:
        return [] if isinstance(value, str) else [f"{key} = {brief(value)}: must be a string"]
    kind, allowed = choice
    if kind == "one of":
        return [] if isinstance(value, str) and value in allowed else [
            f"{key} = {brief(value)}: must be one of {', '.join(allowed)}"]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return [f"{key} = {brief(value)}: must be a list of names ({', '.join(allowed)})"]
    problems = [f"{key}: unknown name {brief(item)} (known: {', '.join(allowed)})" for item in value if item not in allowed]
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        problems.append(f"{key}: {', '.join(map(repr, repeated))} listed more than once")
    missing = [item for item in allowed if item not in value]
    if missing:
        problems.append(f"{key}: must list each of {', '.join(allowed)} once; lacks {', '.join(missing)}")
    return problems


def _missing(tree: Any, parts: list[str], prefix: str) -> list[str]:
    """The paths of `parts` (a required pattern, split at dots) absent from `tree`."""
    if not parts:
        return []
    head, rest = parts[0], parts[1:]
    here = f"{prefix}.{head}" if prefix else head
    if not isinstance(tree, Mapping):
        return []  # a value where a table belongs: reported as such by the loader
    if head == "*":
        if not tree:
            return [f"{prefix}: an empty table (at least one entry is required)"]
        return [line for key, child in tree.items() for line in _missing(child, rest, f"{prefix}.{key}")]
    if head not in tree:
        return [f"{here}: missing (required by the model; no default is assumed)"]
    return _missing(tree[head], rest, here)


def required_problems(model: str, parameters: Mapping) -> list[str]:
    """Required keys and tables `parameters` lacks (REQUIRED and REQUIRED_WHEN of `model`)."""
    patterns = list(REQUIRED.get(model, ()))
    for (key, value), extra in REQUIRED_WHEN.get(model, {}).items():
        node: Any = parameters
        for part in key.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node == value:
            patterns += extra
    lines = list(dict.fromkeys(line for pattern in patterns for line in _missing(parameters, pattern.split("."), "")))
    empty = tuple(line.split(":")[0] + "." for line in lines if line.endswith("(at least one entry is required)"))
    return [line for line in lines if not line.startswith(empty)]  # an empty table, not each entry it lacks
