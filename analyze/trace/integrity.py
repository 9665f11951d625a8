"""Deep checks of a trace's rows: counts against the manifests, unique ids, references.

The rules are data: which columns identify a row, and which name a row of another table
(as documented in schemas/tables.py). Each rule is one DuckDB query over the views.
"""

from __future__ import annotations

import duckdb

from spiketrace.analyze.trace.manifest import COMPLETE
from spiketrace.analyze.trace.parts import Part
from spiketrace.analyze.trace.views import view_name
from spiketrace.schemas.tables import TABLES

# Columns that name a row of another table (documented as such in schemas/tables.py):
# (table, column, referenced table, referenced column); compared within a rank.
REFERENCES = [
    ("events", "scope_id", "scopes", "scope_id"),
    ("events", "stage_id", "stage_markers", "stage_id"),
    ("event_tensors", "seq", "events", "seq"),
    ("event_tensors", "tensor_id", "tensors", "tensor_id"),
    ("op_stats", "seq", "events", "seq"),
    ("packed_inputs", "tensor_id", "tensors", "tensor_id"),
    ("tensor_frees", "uid", "tensors", "uid"),
    ("module_events", "module_id", "modules", "module_id"),
    ("neuron_memories", "module_id", "modules", "module_id"),
    ("neuron_memories", "tensor_id", "tensors", "tensor_id"),
    ("optimizer_steps", "module_id", "modules", "module_id"),
    ("collectives", "seq", "events", "seq"),
]
# Columns that identify a row of their table, per rank.
UNIQUE_KEYS = [
    ("events", "seq"),
    ("tensors", "tensor_id"),
    ("scopes", "scope_id"),
    ("modules", "module_id"),
    ("stage_markers", "stage_id, kind"),
    ("collectives", "seq"),
]


def _check_counts(manifests: dict[int, dict], parts: dict[str, list[Part]]) -> list[str]:
    problems = []
    for rank, manifest in sorted(manifests.items()):
        complete = manifest.get("status") == COMPLETE
        for table in TABLES:
            expected = manifest.get("counts", {}).get(table)
            found = sum(part.rows for part in parts[table] if part.rank == rank)
            # A running trace may hold a part written after its manifest was last updated.
            if expected is not None and (found != expected if complete else found < expected):
                problems.append(f"{table} rank {rank}: the manifest counts {expected} rows, the parts hold {found}")
    return problems


def _check_unique_keys(con: duckdb.DuckDBPyConnection) -> list[str]:
    problems = []
    for table, key in UNIQUE_KEYS:
        rows = con.execute(
            f"SELECT rank, count(*) AS n, min(({key})::VARCHAR) AS example FROM "
            f"(SELECT rank, {key} FROM {view_name(table)} GROUP BY ALL HAVING count(*) > 1) "
            "GROUP BY rank ORDER BY rank"
        ).fetchall()
        problems += [f"{table}.({key}): {n} values repeated on rank {r} (e.g. {ex})" for r, n, ex in rows]
    return problems


def _check_references(con: duckdb.DuckDBPyConnection) -> list[str]:
    problems = []
    for table, column, target, target_column in REFERENCES:
        rows = con.execute(
            f"SELECT rank, count(*), min({column}) FROM {view_name(table)} AS c "
            f"WHERE {column} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {view_name(target)} AS t "
            f"WHERE t.rank = c.rank AND t.{target_column} = c.{column}) GROUP BY rank ORDER BY rank"
        ).fetchall()
        problems += [
            f"{table}.{column}: {n} rows on rank {r} refer to no {target} row (e.g. {column} {ex})"
            for r, n, ex in rows
        ]
    return problems


def find_problems(con: duckdb.DuckDBPyConnection, manifests: dict[int, dict], parts: dict[str, list[Part]]) -> list[str]:
    """Every problem found, one line each; empty when the trace is sound."""
    return _check_counts(manifests, parts) + _check_unique_keys(con) + _check_references(con)
