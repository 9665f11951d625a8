"""What an opened trace says about itself, beside its numbers: the facts the commands show
(counts JSON's `trace` entry), its module classes, and how much of it activation
checkpointing recomputed. Each is one query over the trace's views, so a shard (a rank, or a
range of steps shown in the views) has its own."""

from __future__ import annotations

import pandas as pd


def trace_json(trace) -> dict:
    """The counts document's `trace` entry: the opened trace's facts and what the capture said about itself."""
    return {
        "path": str(trace.path),
        "schema_version": str(trace.schema_version),
        "complete": bool(trace.complete),
        "ranks": [int(r) for r in trace.ranks],
        "events": int(trace.count("events")),
        **trace.health(),
    }


def module_classes(trace) -> pd.DataFrame:
    """scope, class_name, is_leaf, order: each module's tracker scope name and its class."""
    return trace.sql("""
        SELECT coalesce(tracker_name, path) AS scope, any_value(class_name) AS class_name,
               bool_and(is_leaf) AS is_leaf, min(module_id) AS "order"
        FROM modules GROUP BY ALL ORDER BY "order"
    """)


def recomputed_events(trace) -> int:
    """Events activation checkpointing recomputed during backward (0 in a trace of schema 1.0)."""
    return int(trace.con.execute("SELECT count(*) FROM events WHERE coalesce(recompute, false)").fetchone()[0])
