"""Open a trace directory, check it, and query it with DuckDB.

`open_trace` reads every rank's manifest (parsed by its schema) and checks every committed
part (place, size, Parquet footer, schema, row count, and by default its checksum) without
reading any rows, so a damaged, hostile or incompatible trace fails at once with a one-line
message naming the file. The returned `Trace` holds a DuckDB connection with one view per
table over the committed parts (see analyze/trace/views.py); `validate` decodes every column
and checks the rows' plausibility and references.

A trace whose manifest says `running` is being captured, or was left by a process that died
while capturing: it opens with `complete == False` and a warning, and reads as the snapshot
of its committed flushes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import shutil
import tempfile
import types
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from spiketrace.analyze.trace.integrity import find_problems
from spiketrace.analyze.trace.manifest import COMPLETE, TraceError, read_manifests
from spiketrace.analyze.trace.part_rows import part_problems
from spiketrace.analyze.trace.parts import Part, PartVanishedError, find_parts
from spiketrace.analyze.trace.spill import remove_orphans
from spiketrace.analyze.trace.views import create_views

OP_COUNTS_QUERY = "SELECT op, count(*) AS count FROM events GROUP BY op ORDER BY count DESC, op"
# torch.profiler's markers: record_function ranges (optimizer.step() opens one, as does any
# `with torch.profiler.record_function(...)`) reach the dispatcher as `profiler.*` ops that
# mark a range and do no work. Tables of work list them apart (counters: not applicable).
PROFILER_MARKER_PREFIX = "profiler."
MARKERS_QUERY = (f"SELECT op, count(*) AS count FROM events WHERE starts_with(op, '{PROFILER_MARKER_PREFIX}') "
                 "GROUP BY op ORDER BY count DESC, op")
STAGES_QUERY = "SELECT * FROM stages ORDER BY rank, begin_seq"


def accepts_path(function):
    """Let `function(trace, ...)` take a trace's path too: opened for the call, then closed."""

    @functools.wraps(function)
    def wrapper(trace, *args, **kwargs):
        if isinstance(trace, (str, os.PathLike)):
            with open_trace(trace) as opened:
                return function(opened, *args, **kwargs)
        return function(trace, *args, **kwargs)

    return wrapper


SPILL_PREFIX = "spiketrace-duckdb-"
OPEN_ATTEMPTS = 3


class TraceChangedError(TraceError):
    """The trace's files changed while it was read (its capture compacted them, or a new run
    started in its directory); what was read so far was consistent, but is superseded."""


# How traces are opened where the caller does not say: the CLI's --run and --no-verify set it
# for every trace a command opens (analyses, reports and diffs open theirs deep inside).
_OPEN_DEFAULTS: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "spiketrace_open_defaults", default=types.MappingProxyType({}))


@contextlib.contextmanager
def open_defaults(**options):
    """Within the block, open_trace uses `options` (run=, verify=) where not given."""
    token = _OPEN_DEFAULTS.set({**_OPEN_DEFAULTS.get(), **options})
    try:
        yield
    finally:
        _OPEN_DEFAULTS.reset(token)


def open_trace(path: str | os.PathLike, *, run: str | None = None, verify: bool | None = None,
               ranks: list[int] | None = None, threads: int = 2, memory_limit: str = "1GB",
               max_temp_size: str = "8GB") -> Trace:
    """Open and check the trace at `path`; raises TraceError naming the file at fault.

    Only committed parts are read (analyze/trace/parts.py). `verify` (default True) also
    compares each part's checksum with the one committed (it reads every byte of the parts;
    False skips it for a trace you trust). `run` picks one capture run (its id or a unique prefix) in a
    root that holds shards of several. Unset, both come from `open_defaults`."""
    defaults = _OPEN_DEFAULTS.get()
    run = defaults.get("run") if run is None else run
    verify = defaults.get("verify", True) if verify is None else verify
    root = Path(path)
    for attempt in range(OPEN_ATTEMPTS):
        warnings: list[str] = []
        manifests = current_manifests(root, run, ranks, warnings)
        try:
            parts = find_parts(root, manifests, warnings, verify=verify)
            _add_state_warnings(manifests, ranks, warnings)
            return Trace(root, manifests, parts, warnings, threads=threads, memory_limit=memory_limit,
                         max_temp_size=max_temp_size, selection=(run, ranks))
        except (PartVanishedError, duckdb.IOException):
            # A capture that compacts its parts at close removes the ones it replaced once the
            # new list is committed: a reader that read the old list (while checking the parts,
            # or while DuckDB binds the views to them) tries the new one.
            if attempt + 1 == OPEN_ATTEMPTS or current_manifests(root, run, ranks) == manifests:
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


# How a trace whose capture has not closed (or died) is said: a reader that expects one (the
# live analysis reads a trace while it is written) tells this warning by it.
UNFINISHED = ("not complete (still being captured, or the capturing process died); this is the snapshot of its "
              "committed flushes")


def _add_state_warnings(manifests: dict[int, dict], ranks: list[int] | None, warnings: list[str]) -> None:
    for rank, manifest in sorted(manifests.items()):
        if manifest.get("status") != COMPLETE:
            warnings.append(f"rank {rank}: trace status is {manifest.get('status')!r}, {UNFINISHED}")
    if len({m.get("schema_version") for m in manifests.values()}) > 1:
        versions = {rank: m.get("schema_version") for rank, m in sorted(manifests.items())}
        warnings.append(f"ranks were written with different schema versions: {versions}")
    world_size = max(int(m.get("world_size") or 1) for m in manifests.values())
    if len(manifests) < world_size and ranks is None:
        warnings.append(f"world size is {world_size} but only ranks {sorted(manifests)} have a manifest")


def current_manifests(root: Path, run: str | None, ranks: list[int] | None,
                      warnings: list[str] | None = None) -> dict[int, dict]:
    """The manifests on disk now, of the run and ranks a trace is opened with."""
    manifests = read_manifests(root, run, warnings)
    if ranks is None:
        return manifests
    missing = sorted(set(ranks) - set(manifests))
    if missing:
        raise TraceError(f"{root}: no rank {missing[0]} (its ranks are {sorted(manifests)})")
    return {rank: manifests[rank] for rank in sorted(set(ranks))}


class Trace:
    """An opened trace: its manifests, its parts, and a DuckDB connection with its views."""

    def __init__(
        self, path: Path, manifests: dict[int, dict], parts: dict[str, list[Part]], warnings: list[str], *,
        threads: int = 2, memory_limit: str = "1GB", max_temp_size: str = "8GB",
        selection: tuple[str | None, list[int] | None] = (None, None),
    ) -> None:
        self.path = path
        self._selection = selection  # (run, ranks) it was opened with: what changed_since_open re-reads
        self.manifests = manifests
        self.ranks = sorted(manifests)
        self.manifest = manifests.get(0, manifests[self.ranks[0]])
        self.schema_version: str = self.manifest["schema_version"]
        self.complete = all(m.get("status") == COMPLETE for m in manifests.values())
        self.warnings = warnings
        self.parts = parts
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET threads TO {int(threads)}")
        # Bounded memory for any trace size: DuckDB spills its joins and aggregates to disk
        # beyond this, and need not keep insertion order for what the analyses compute.
        self.con.execute(f"SET memory_limit = '{memory_limit}'")
        self.con.execute("SET preserve_insertion_order = false")
        # ASOF joins stay sort-based: DuckDB picks a nested loop (every pair of rows) when it
        # estimates the left side under 64 rows, and a filtered CTE can be estimated so.
        self.con.execute("SET asof_loop_join_threshold = 0")
        # Range joins (record_key) stay IEJoins: below 1,000 rows on a side DuckDB would pick
        # a piecewise merge join, which compares that side's rows with every row of the other.
        self.con.execute("SET merge_join_threshold = 0")
        # What does not fit in memory_limit spills to a directory of this Trace's own, capped
        # at max_temp_size (a query needing more fails with DuckDB's message naming the limit),
        # and removed on close, or when the Trace is collected, so nothing is left behind.
        remove_orphans(SPILL_PREFIX)
        self._spill = tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{os.getpid()}-")
        self._remove_spill = weakref.finalize(self, shutil.rmtree, self._spill, ignore_errors=True)
        self.con.execute(f"SET temp_directory = '{self._spill}'")
        self.con.execute(f"SET max_temp_directory_size = '{max_temp_size}'")
        try:
            create_views(self.con, path, {table: [p.path for p in ps] for table, ps in parts.items()})
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        state = "complete" if self.complete else "incomplete"
        return f"<Trace {str(self.path)!r} schema {self.schema_version}, ranks {self.ranks}, {state}>"

    def sql(self, query: str, params=None) -> pd.DataFrame:
        """Run `query` against the views; the result as a pandas DataFrame."""
        return self.con.execute(query, params).df()

    def arrow(self, query: str, params=None) -> pa.Table:
        """Run `query` against the views; the result as an Arrow table."""
        return self.con.sql(query, params=params).to_arrow_table()

    def files(self, table: str) -> list[Path]:
        """The part files of `table`, all ranks, ordered by rank then name."""
        return [part.path for part in self.parts[table]]

    def count(self, table: str) -> int:
        """Rows of `table` (from the part footers) or of any other view (by a query)."""
        if table in self.parts:
            return sum(part.rows for part in self.parts[table])
        return int(self.con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0])

    def validate(self) -> list[str]:
        """Deep checks; the problems found, one line each (empty when sound): every committed
        part's checksum, every column decoded, the plausibility rules of schemas/plausibility.py
        and the record order (analyze/trace/part_rows.py); then, once every part reads, counts
        against the manifests, unique ids and references across tables (integrity.py)."""
        try:
            problems, all_readable = part_problems(self.con, self.parts)
            if not all_readable:
                return problems + ["(counts, unique ids and references not checked: some parts cannot be read)"]
            return problems + find_problems(self.con, self.manifests, self.parts)
        except (duckdb.IOException, OSError) as exc:
            if self.changed_since_open():
                raise TraceChangedError(
                    f"{self.path}: the trace changed while it was read (its capture compacted its parts, or "
                    "a new run started); open it again"
                ) from exc
            raise

    def changed_since_open(self) -> bool:
        """True if the manifests on disk are no longer the ones this Trace read."""
        try:
            return current_manifests(self.path, *self._selection) != self.manifests
        except TraceError:
            return True

    def summary(self) -> dict:
        """What `spiketrace info` shows: manifest facts and headline counts (JSON-ready)."""
        statuses = {rank: m.get("status") for rank, m in self.manifests.items()}
        started: list[Any] = [m.get("started_at") for m in self.manifests.values()]  # ISO times, or None
        ended: list[Any] = [m.get("ended_at") for m in self.manifests.values()]
        counts = self.con.execute(
            "SELECT (SELECT count(DISTINCT op) FROM events), "
            "(SELECT count(*) FROM stages), "
            "(SELECT count(*) FROM (SELECT DISTINCT rank, seq FROM optimizer_steps))"
        ).fetchall()[0]
        return {
            "path": str(self.path),
            "status": statuses[self.ranks[0]] if len(set(statuses.values())) == 1 else "mixed",
            "rank_status": {str(rank): status for rank, status in sorted(statuses.items())},
            "complete": self.complete,
            "schema_version": self.schema_version,
            "versions": self.manifest.get("versions", {}),
            "device": self.manifest.get("device"),
            "ranks": self.ranks,
            "world_size": self.manifest.get("world_size"),
            "started_at": None if None in started else min(started),
            "ended_at": None if None in ended else max(ended),
            "steps_recorded": self.manifest.get("steps_recorded"),
            "metadata": self.manifest.get("metadata", {}),
            "counts": {
                "events": self.count("events"),
                "ops": counts[0],
                "modules": self.count("modules"),
                "stages": counts[1],
                "ranks": len(self.ranks),
                "optimizer_steps": counts[2],
            },
            "warnings": list(self.warnings),
            **self.health(),
        }

    def health(self) -> dict:
        """What the capture itself reported: its own failures (`degraded`, per rank), torch.compile
        seen while capturing, SpikingJelly tracker underflows it survived, threads it could
        not reach that ran meanwhile (`unrecorded_threads`, only when there were some) and what
        its torch could not tell (`torch_limitations`, only when there was some) (JSON-ready)."""
        degraded = {
            str(rank): list(m.get("degraded") or []) for rank, m in sorted(self.manifests.items()) if m.get("degraded")
        }
        compiled_seen = sorted({str(what) for m in self.manifests.values() for what in m.get("compiled_seen") or []})
        underflows = [entry for m in self.manifests.values() for entry in m.get("tracker_underflows") or []]
        # Python threads that ran unrecorded while the capture was open (capture/session/threads.py):
        # a key only when there were some, so that the documents of traces without any (most
        # traces, and every trace captured before threads were watched) all have the same keys.
        unrecorded = [{"rank": rank, **entry} for rank, m in sorted(self.manifests.items())
                      for entry in m.get("unrecorded_threads") or [] if isinstance(entry, dict)]
        # What the capture's torch could not tell (capture/modules/tracker.py), once however
        # many ranks say it; a key only when there is some, as for unrecorded threads.
        limitations = list({(str(e.get("feature")), str(e.get("note"))): e for m in self.manifests.values()
                            for e in m.get("torch_limitations") or [] if isinstance(e, dict)}.values())
        return {
            "degraded": degraded,
            "compiled": any(bool(m.get("compiled")) for m in self.manifests.values()),
            "compiled_seen": compiled_seen,
            "tracker_underflows": underflows,
            **({"unrecorded_threads": unrecorded} if unrecorded else {}),
            **({"torch_limitations": limitations} if limitations else {}),
        }

    def op_counts(self) -> pd.DataFrame:
        """Every op seen, with its number of events (all ranks), most frequent first."""
        return self.sql(OP_COUNTS_QUERY)

    def stages(self) -> pd.DataFrame:
        """The `stages` view, in record order."""
        return self.sql(STAGES_QUERY)

    def close(self) -> None:
        self.con.close()
        self._remove_spill()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
