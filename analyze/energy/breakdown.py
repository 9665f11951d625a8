"""A report as one tidy frame (every model's `Report.to_frame()`): one row per (breakdown, key).

`breakdown` names what the row breaks the energy down by (total, component, stage, step,
rank, module, ...) or what else it reports (count, uncosted, ...); `key` is the entry within
it; `pj` holds energies and `count` counts, and a model may add columns of its own (SpikeSim's
`value` and `unit`). recost, spiketrace.analyze.many and present/ read every model's frame the
same way; its total row is the one keyed by one of TOTAL_KEYS.

    breakdown_frame(section("total", {"energy_total_pj": 12.5}),
                    section("stage", {"forward": 10.0, "backward": 2.5}),
                    section("count", {"mac": 40}, "count"))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

COLUMNS = ("breakdown", "key", "pj", "count")
# The key of a report's total row: Lemaire's report names it total_pj, as SpikingJelly's does.
TOTAL_KEYS = ("energy_total_pj", "total_pj")


def section(breakdown: str, values: Mapping[str, Any] | Iterable[tuple[str, Any]], column: str = "pj",
            **cells) -> list[dict[str, Any]]:
    """The rows of one breakdown: each (key, value) of `values` (a mapping, or pairs when a key
    may repeat) with the value in `column`, and `cells` (column -> value) on every row."""
    pairs = values.items() if isinstance(values, Mapping) else values
    return [{"breakdown": breakdown, "key": key, column: value, **cells} for key, value in pairs]


def breakdown_frame(*sections: Iterable[Mapping[str, Any]], columns: Sequence[str] = COLUMNS) -> pd.DataFrame:
    """The frame of `sections` (lists of rows: section()'s, or rows built alike), in order; a
    column a row does not give is None in it."""
    rows = [tuple(row.get(column) for column in columns) for part in sections for row in part]
    return pd.DataFrame(rows, columns=list(columns))


def total_of(frame: pd.DataFrame) -> float:
    """The total energy of a report frame, in pJ."""
    return float(frame.loc[frame["key"].isin(TOTAL_KEYS), "pj"].iloc[0])
