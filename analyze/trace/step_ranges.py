"""Step-range shards: one rank's records from the start of one recorder step to the start of a
later one, so that a rank too large to evaluate at once is evaluated a range of steps at a time.

A rank's records are in one order (seq), and its recorder step never decreases along it, so the
steps [first, end) of a rank are the records [low, high) of seq between the first record of
step `first` and the first record of step `end` (`step_bounds` reads them, and refuses a rank
whose steps interleave). `restrict` makes an opened rank (open_trace(path, ranks=[r])) show
only those records: every table with a seq keeps the rows in [low, high), and the tensor
states are those described in [low, high) plus the older ones a kept row refers to (the
parameters an earlier optimizer step wrote, ...), with their lifetimes (tensor_frees). Every
view built on the tables (stages, tensors, the named views) follows, as DuckDB binds a view's
query when it runs. Each record is in exactly one shard's range, each tensor state described
in exactly one, so what the analyses sum over records adds up over the shards; which analyses
do is checked by tests/test_step_shards.py (analyze/many/combine.py STEP_ADDITIVE_MODELS).

`shown_in_ranges` does the same in place, on any opened trace: NeuroMC's mapping
(analyze/energy/neuromc) walks the pieces `record_shards` cuts a large trace into (ranks
packed, a large rank's step ranges), each shown in the trace's own views in turn (rows of
other ranks hidden too), and the views show what they showed before once it is done
(tests/test_step_ranges.py). The many-trace engines (analyze/many/shards.py) open each piece
on its own instead (`restrict`).
"""

from __future__ import annotations

import contextlib
import itertools

from spiketrace.analyze.trace.views import view_body, view_name
from spiketrace.schemas.tables import TABLES

# Events one evaluation reads at most, where the work splits: spiketrace.analyze.many evaluates a
# trace holding more rank by rank (ranks packed up to this many), a rank holding more step range
# by step range, and NeuroMC's mapping cuts a trace so too (reading this number when it maps), so
# that their memory follows the piece, not the trace. benchmarks/analysis_throughput.py measures
# NeuroMC's peak RSS mapped in pieces (`energy neuromc`) and whole (`energy neuromc whole`).
SHARD_EVENTS = 1_500_000
# Schema holding each table view as the trace was opened; `main` holds the restricted ones.
WHOLE_SCHEMA = "spiketrace_whole_rank"
# Tables whose rows are records of the range: by their own seq, or the seq of their event.
RECORD_TABLES = ("events", "event_tensors", "op_stats", "packed_inputs", "module_events", "neuron_memories",
                 "stage_markers", "optimizer_steps", "collectives")
# Tables with a step column: where the rank's steps start and end (events count the work).
STEP_TABLES = ("events", "module_events", "stage_markers", "optimizer_steps")
# Where kept rows name tensor states: (table, SQL of the tensor ids of a row, unnested when a list).
TENSOR_REFERENCES = (("event_tensors", "tensor_id"), ("packed_inputs", "tensor_id"),
                     ("neuron_memories", "tensor_id"), ("module_events", "unnest(inputs)"),
                     ("module_events", "unnest(outputs)"), ("module_events", "unnest(kwarg_inputs)"))


def step_bounds(trace, rank: int) -> list[tuple[int, int, int]] | None:
    """(step, events, first seq) of each step of `rank`, in order; None when a step's records
    do not all come before the next step's (no step range is then a range of records)."""
    parts = " UNION ALL ".join(
        f"SELECT step, {'count(*)' if table == 'events' else '0'} AS events, min(seq) AS low, max(seq) AS high "
        f"FROM {table} WHERE rank = {int(rank)} GROUP BY step" for table in STEP_TABLES)
    rows = trace.con.execute(f"SELECT step, sum(events)::BIGINT, min(low), max(high) FROM ({parts}) "
                             "GROUP BY step ORDER BY step").fetchall()
    if any(before[3] >= after[2] for before, after in itertools.pairwise(rows)):
        return None
    return [(int(step), int(events), int(low)) for step, events, low, _ in rows]


def step_ranges(bounds: list[tuple[int, int, int]], shard_events: int) -> list[tuple[tuple, tuple]]:
    """Consecutive steps grouped into ceil(events / `shard_events`) ranges of about equal events
    (a range holds the steps that start within its share, so it ends past the share by less than
    one step): ((first step, end step), (low seq, high seq)) each, the first range open below
    and the last open above (None), so that the ranges hold every record."""
    total = sum(events for _, events, _ in bounds)
    share = total / max(1, -(-total // max(1, shard_events)))  # the events of each of ceil(total / shard_events)
    by_share: dict[int, list[tuple[int, int, int]]] = {}
    before = 0
    for bound in bounds:
        by_share.setdefault(int(before // share) if share else 0, []).append(bound)
        before += bound[1]
    groups = list(by_share.values())
    ranges = []
    for i, group in enumerate(groups):
        following = groups[i + 1][0] if i + 1 < len(groups) else None
        steps = (group[0][0], None if following is None else following[0])
        records = (None if i == 0 else group[0][2], None if following is None else following[2])
        ranges.append((steps, records))
    return ranges


def _within(column: str, low: int | None, high: int | None) -> str:
    clauses = ([f"{column} >= {int(low)}"] if low is not None else []) + (
        [f"{column} < {int(high)}"] if high is not None else [])
    return " AND ".join(clauses) or "true"


def _stashed_body(con, name: str) -> str:
    """The query of view `name` as it was before the first restriction (WHOLE_SCHEMA's copy)."""
    sql = con.execute("SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = ?",
                      [WHOLE_SCHEMA, name]).fetchone()[0]
    return sql[sql.index(" AS ") + len(" AS "):].rstrip().rstrip(";")


def _stash(con) -> None:
    """Copy each table view's current query into WHOLE_SCHEMA, once: the rows a restriction
    shows a part of (the whole rank as opened, or the rows a selection already shows)."""
    if con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ?", [WHOLE_SCHEMA]).fetchone()[0]:
        return
    con.execute(f"CREATE SCHEMA {WHOLE_SCHEMA}")
    for name in (view_name(table) for table in TABLES):
        con.execute(f"CREATE VIEW {WHOLE_SCHEMA}.{name} AS {view_body(con, name)}")


def _show(con, ranks: tuple[int, ...] | None, low: int | None, high: int | None) -> None:
    """The table views of `con` show the stashed rows of `ranks` (None: all) with low <= seq < high."""
    of_ranks = "true" if ranks is None else f"rank IN ({', '.join(str(int(r)) for r in ranks)})"
    if ranks is not None:  # tables without records (modules, scopes, ...): the ranks' rows
        for name in (view_name(table) for table in TABLES if table not in (*RECORD_TABLES, "tensors", "tensor_frees")):
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {WHOLE_SCHEMA}.{name} WHERE {of_ranks}")
    for table in RECORD_TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {WHOLE_SCHEMA}.{table} "
                    f"WHERE {of_ranks} AND {_within('seq', low, high)}")
    states = view_name("tensors")
    described = f"SELECT * FROM {WHOLE_SCHEMA}.{states} WHERE {of_ranks} AND {_within('first_seq', low, high)}"
    if low is not None:
        # older states the range's rows name, looked up once: only ids up to the largest id
        # described before the range can be one (ids grow along seq, so these are few)
        largest = con.execute(f"SELECT max(tensor_id) FROM {WHOLE_SCHEMA}.{states} "
                              f"WHERE {of_ranks} AND first_seq < {int(low)}").fetchone()[0]
        named = " UNION ALL ".join(f"SELECT rank, tensor_id FROM (SELECT rank, {ids} AS tensor_id FROM {table}) "
                                   f"WHERE tensor_id <= {int(largest or -1)}" for table, ids in TENSOR_REFERENCES)
        con.execute(f"CREATE OR REPLACE TABLE {WHOLE_SCHEMA}.older_states AS SELECT * FROM {WHOLE_SCHEMA}.{states} "
                    f"WHERE {of_ranks} AND first_seq < {int(low)} AND (rank, tensor_id) IN ({named})")
        described += f" UNION ALL SELECT * FROM {WHOLE_SCHEMA}.older_states"
    con.execute(f"CREATE OR REPLACE VIEW {states} AS {described}")
    # the lifetimes of those states' objects: each is alive at a record of the range, so freed
    # after `low` (freed_seq is the seq after the free)
    con.execute(f"CREATE OR REPLACE VIEW tensor_frees AS SELECT * FROM {WHOLE_SCHEMA}.tensor_frees "
                f"WHERE {of_ranks} AND {_within('freed_seq', None if low is None else low + 1, None)}")


def restrict(trace, low: int | None, high: int | None) -> None:
    """From now on the views of `trace` (one rank) show only the records with low <= seq < high
    (None: no bound), as the module docstring says; called again, another range of them."""
    _stash(trace.con)
    trace.parts = {}  # their footers count the whole rank: Trace.count now counts the views' rows
    _show(trace.con, None, low, high)


def record_shards(trace, shard_events: int) -> list[tuple[tuple[int, ...], tuple[int | None, int | None] | None]]:
    """The pieces in which to map `trace`, each of about `shard_events` events at most: none
    when it holds no more, or cannot be cut (one rank whose steps interleave), or the part
    footers that count its events are unknown (a trace already restricted); else (ranks,
    records) each: consecutive ranks packed up to that many events (records None: all of
    theirs), and a larger rank's step ranges (step_ranges), or the rank whole when its steps
    interleave or it holds one step."""
    events: dict[int, int] = dict.fromkeys(trace.ranks, 0)
    for part in trace.parts.get("events", []):
        events[part.rank] = events.get(part.rank, 0) + part.rows
    if sum(events.values()) <= shard_events:
        return []
    shards: list[tuple[tuple[int, ...], tuple[int | None, int | None] | None]] = []
    group: list[int] = []
    for rank in sorted(events):
        bounds = step_bounds(trace, rank) if events[rank] > shard_events else None
        if bounds and len(bounds) > 1:
            if group:
                shards.append((tuple(group), None))
                group = []
            shards += [((rank,), records) for _, records in step_ranges(bounds, shard_events)]
            continue
        if group and sum(events[r] for r in group) + events[rank] > shard_events:
            shards.append((tuple(group), None))
            group = []
        group.append(rank)
    if group:
        shards.append((tuple(group), None))
    return shards if len(shards) > 1 else []  # one piece of whole ranks: the trace as it is


@contextlib.contextmanager
def shown_in_ranges(trace, shard_events: int):
    """Iterate over the pieces of `trace` (record_shards): within the block, each step of the
    iterator shows the next piece in the trace's views (and yields it); a trace too small to
    cut yields None once, showing everything. On exit the views show what they showed before."""
    shards = record_shards(trace, shard_events)
    if not shards:
        yield iter([None])
        return
    parts = trace.parts
    _stash(trace.con)
    trace.parts = {}

    def each():
        for ranks, records in shards:
            _show(trace.con, ranks, *(records or (None, None)))
            yield ranks, records

    try:
        yield each()
    finally:
        for name in (view_name(table) for table in TABLES):
            trace.con.execute(f"CREATE OR REPLACE VIEW {name} AS {_stashed_body(trace.con, name)}")
        trace.con.execute(f"DROP SCHEMA {WHOLE_SCHEMA} CASCADE")
        trace.parts = parts
