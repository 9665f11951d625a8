"""Per-group totals beside the per-(scope, op) counts: each counter's Global value per
(rank, step, stage, ...) of the events, for breakdowns over training steps.

The engine's passes then group by the reported columns and these; each pass's sums are
reduced at once to both (reducer), so what is kept is the per-(scope, op) sums by the
reported columns plus one row per group, however many steps the trace holds.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa


def _sum_columns(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if c not in ("rank", "scope_id", "op_code", *GROUP_COLUMNS)]


GROUP_COLUMNS = ("stage", "phase", "step", "rank")


def reducer(group_by: tuple[str, ...], totals_by: tuple[str, ...], names):
    """Pass sums grouped by group_by + totals_by -> (the sums by group_by, each counter's
    value summed per totals_by over every scope and op: its Global total per group)."""
    detail_keys = ["rank", "scope_id", "op_code", *(g for g in group_by if g != "rank")]
    totals_keys = list(totals_by)

    def reduce(table: pa.Table):
        columns = _sum_columns(table)
        detail = table.group_by(detail_keys, use_threads=False).aggregate([(c, "sum") for c in columns])
        detail = detail.rename_columns([c.removesuffix("_sum") for c in detail.column_names])
        values = [f"value_{n}" for n in names if f"value_{n}" in table.column_names]
        totals = table.group_by(totals_keys, use_threads=False).aggregate([(c, "sum") for c in values])
        totals = totals.rename_columns([c.removesuffix("_sum") for c in totals.column_names])
        return detail.select([*detail_keys, *columns]), totals

    return reduce


def totals_frame(totals: list[pa.Table], names, totals_by) -> pd.DataFrame:
    """counter, <totals_by>, value: each counter's Global value per group."""
    columns = ["counter", *totals_by, "value"]
    frames = []
    for table in totals:
        frame = table.to_pandas()
        for name in names:
            if f"value_{name}" in frame:
                frames.append(frame[list(totals_by)].assign(counter=name, value=frame[f"value_{name}"]))
    if not frames:
        return pd.DataFrame({c: pd.Series([], dtype="int64" if c == "value" else object) for c in columns})
    frame = pd.concat(frames, ignore_index=True).dropna(subset=["value"])
    frame = frame.groupby(["counter", *totals_by], sort=True, as_index=False)["value"].sum()
    return frame[columns].astype({"value": "int64"})
