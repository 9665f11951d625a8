"""`--set KEY=VALUE` overrides: the text of each parsed strictly (ASCII decimal numbers, an
optional unit after one space: "2.5 fJ/bit"; "true"/"false"; a comma-separated list of names)
and checked like a preset file's value; each returns its problems rather than raising."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spiketrace.analyze.presets.checks import PresetError, number_problems, parse_number, plain_value_problems
from spiketrace.analyze.presets.ranges import CHOICES
from spiketrace.analyze.presets.units import NON_NUMBERS, convert


def shown_raw(raw) -> str:
    """An override's value for a message: huge integers by their size, long text cut short."""
    if isinstance(raw, int) and raw.bit_length() > 256:
        return f"<an integer of {int(raw.bit_length() * 0.30103) + 1} digits>"
    text = str(raw)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_assignments(assignments, where: str) -> dict[str, Any]:
    if isinstance(assignments, Mapping):
        return {str(key): value for key, value in assignments.items()}
    pairs = {}
    for text in assignments:
        key, sep, value = str(text).partition("=")
        if not sep or not key.strip():
            raise PresetError(f"{where}: override {text!r} is not KEY=VALUE")
        pairs[key.strip()] = value.strip()
    return pairs


def override_value(raw, unit: str, key: str, model: str, spec=None) -> tuple[Any, list[str]]:
    """An override's value in the model's `unit`, and its problems."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw.bit_length() > 1024:
        return None, [f"{key} = {shown_raw(raw)}: not a finite number"]
    if unit in NON_NUMBERS:
        if unit == "bool" and not isinstance(raw, bool):
            raw = {"true": True, "false": False}.get(str(raw).lower(), raw)
        elif isinstance(raw, str) and CHOICES.get(model, {}).get(key, ("",))[0] == "permutation":
            # a list of names: level_order=dram,sram,reg,noc
            raw = [part.strip() for part in raw.split(",")]
        elif unit == "str" and not isinstance(raw, (list, tuple)):
            raw = str(raw)
        value = list(raw) if isinstance(raw, tuple) else raw
        return value, plain_value_problems(key, value, unit, model)
    if isinstance(raw, bool) or (not isinstance(raw, (int, float, str))):
        return None, [f"{key} = {shown_raw(raw)} is not a number (unit {unit})"]
    if isinstance(raw, (int, float)):
        text, given = "", unit
    else:
        text, _, given = raw.strip().partition(" ")
        given = given.strip() or unit
    try:
        number = float(raw) if isinstance(raw, (int, float)) else parse_number(text)
    except OverflowError:
        number = float("inf")
    if number is None:
        return None, [f"{key} = {shown_raw(raw)!r} is not a number in ASCII digits (unit {unit})"]
    try:
        value = convert(number, given, unit)
    except ValueError as problem:
        return None, [f"{key}: {problem}"]
    return value, number_problems(key, value, unit, model, spec)
