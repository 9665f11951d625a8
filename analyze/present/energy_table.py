"""What `spiketrace energy` shows: one breakdown of a report as a tree with per-level shares.

Components nest (memory = parameter + neuron state memory; analyze/energy/scopes.py) and
modules nest (Net includes Net.fc1): each row's share is of its parent (of the total at the
top level), so the shares of one level add up to 100%. Names lose their `_pj` suffix: the
unit is in the value, formatted by present/units.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pandas as pd

from spiketrace.analyze.energy.breakdown import total_of
from spiketrace.analyze.energy.scopes import COMPONENT_PARENTS
from spiketrace.analyze.present.counts import STAGE_ORDER
from spiketrace.analyze.present.safe_text import safe_line
from spiketrace.analyze.present.units import format_energy


def _natural(text) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", str(text)) if part]


def _stage_key(stage) -> tuple:
    return (0, STAGE_ORDER.index(stage), []) if stage in STAGE_ORDER else (1, 0, _natural(stage))


# The breakdowns whose keys come from the trace (its stages, steps, ranks, modules), each in one
# fixed order whatever order a model or the query engine produced them in; the others (components,
# counts, memory levels, ...) keep the order the model's code gives them.
KEY_ORDERS: dict[str, Callable[[Any], list | tuple]] = {
    "stage": _stage_key, "step": _natural, "rank": _natural, "module": _natural}


def ordered_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A report frame (breakdown, key, pj, ...) in a fixed order: the breakdowns as the model
    lists them, the keys of KEY_ORDERS' breakdowns sorted so, the others as the model gives them."""
    if frame.empty:
        return frame.reset_index(drop=True)
    first = {b: i for i, b in enumerate(dict.fromkeys(frame["breakdown"]))}
    keys = []
    for position, (breakdown, key) in enumerate(zip(frame["breakdown"], frame["key"])):
        order = KEY_ORDERS.get(breakdown)
        keys.append((first[breakdown], order(key) if order else [], position))
    return frame.iloc[sorted(range(len(frame)), key=keys.__getitem__)].reset_index(drop=True)


def ordered_json(document: dict) -> dict:
    """A report's JSON (`Report.to_json()`) with its energy_by_stage, _step, _rank and _module
    objects in the order of KEY_ORDERS (JSON objects are unordered; scripts diffing the text are not)."""
    ordered = dict(document)
    for name, order in KEY_ORDERS.items():
        for field in (f"energy_by_{name}", f"energy_by_{name}_component"):
            value = ordered.get(field)
            if isinstance(value, dict):
                ordered[field] = {k: value[k] for k in sorted(value, key=order)}
    return ordered


def energy_views(frame: pd.DataFrame) -> list[str]:
    """The breakdowns of a report frame that carry energies (area and counts do not)."""
    return [v for v in frame["breakdown"].unique() if v not in ("total", "count")
            and frame.loc[frame["breakdown"] == v, "pj"].notna().any()]


def _parents(keys: list[str], view: str, model: str) -> dict[str, str | None]:
    if view == "component":
        table = COMPONENT_PARENTS.get(model, {})
        return {k: table.get(k) if table.get(k) in keys else None for k in keys}
    if view == "module":  # the nearest enclosing module that is itself a row
        present = set(keys)
        parents = {}
        for key in keys:
            parts = key.split(".")
            parents[key] = next((".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)
                                 if ".".join(parts[:i]) in present), None)
        return parents
    return {k: None for k in keys}


def energy_rows(frame: pd.DataFrame, view: str, model: str) -> list[tuple[str, int, float, float | None]]:
    """(name, depth, pJ, share of its parent or of the total) in tree order, largest first per level."""
    rows = frame[(frame["breakdown"] == view) & frame["pj"].notna()]
    value = dict(zip(rows["key"].astype(str), rows["pj"].astype(float)))
    parents = _parents(list(value), view, model)
    children: dict[str | None, list[str]] = {}
    for key, parent in parents.items():
        children.setdefault(parent, []).append(key)
    total = total_of(frame)
    out = []

    def visit(parent: str | None, depth: int) -> None:
        whole = total if parent is None else value[parent]
        for key in sorted(children.get(parent, []), key=lambda k: (-value[k], k)):
            out.append((key, depth, value[key], value[key] / whole if whole else None))
            visit(key, depth + 1)

    visit(None, 0)
    return out


def _label(key: str, view: str) -> str:
    return key.removesuffix("_pj").removeprefix("energy_") if view == "component" else key


def energy_text(frame: pd.DataFrame, view: str, model: str, classes=None, unit: str | None = None) -> list[str]:
    """The table lines: name (indented per level), energy with its unit, share of the parent.
    `classes`: scope -> class name, shown beside each module (`Net.0 (Linear)`)."""
    rows = energy_rows(frame, view, model)
    classes = classes or {}
    labels = ["  " * depth + safe_line(_label(key, view))
              + (f" ({safe_line(classes[key])})" if view == "module" and key in classes else "")
              for key, depth, _, _ in rows]
    energies = [format_energy(pj, unit=unit) for _, _, pj, _ in rows]
    shares = ["-" if share is None else f"{100 * share:.1f}%" for *_, share in rows]
    width = max([len(view), *map(len, labels)])
    lines = [f"{view:<{width}}  {'energy':>14}  {'share':>6}"]
    lines += [f"{label:<{width}}  {energy:>14}  {share:>6}" for label, energy, share in zip(labels, energies, shares)]
    lines.append("(shares are of the parent row, or of the total at the top level)")
    return lines
