"""Open a trace directory, check it, and query it with DuckDB.

`open_trace` reads every rank's manifest and checks the footer of every part (its Parquet
metadata, schema version and table name) without reading any rows, so a damaged or
incompatible trace fails at once with a one-line message naming the file. The returned
`Trace` holds a DuckDB connection with one view per table (see analyze/views.py).

A trace whose manifest says `running` was left by a process that died while capturing: it
opens with `complete == False` and a warning, and its flushed rows read normally.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analyze.integrity import COMPLETE, find_problems
from analyze.views import create_views
from schemas import layout
from schemas.tables import TABLES
from schemas.version import SCHEMA_VERSION, SchemaVersionError, check_readable, parse_version

OP_COUNTS_QUERY = "SELECT op, count(*) AS count FROM events GROUP BY op ORDER BY count DESC, op"
STAGES_QUERY = "SELECT * FROM stages ORDER BY rank, begin_seq"


class TraceError(ValueError):
    """A trace cannot be opened: its message is one line naming the offending file."""


class TraceVersionError(TraceError, SchemaVersionError):
    """A manifest or part was written with a schema version this reader cannot read."""


class TraceNotFoundError(TraceError, FileNotFoundError):
    """The trace path does not exist."""


@dataclass(frozen=True)
class Part:
    path: Path
    table: str
    rank: int
    rows: int


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _directory_rank(directory: Path) -> int | None:
    """R for a `rank=R` part directory, else None."""
    value = directory.name.removeprefix("rank=")
    return int(value) if value.isdigit() else None


def _check_version(found, where: Path) -> None:
    try:
        check_readable(found, str(where))
    except SchemaVersionError as exc:
        message = str(exc)  # a malformed version's message does not name the file
        raise TraceVersionError(message if str(where) in message else f"{where}: {message}") from exc


def read_manifests(root: Path) -> dict[int, dict]:
    """rank -> manifest of every rank of the trace at `root`, each checked."""
    if not root.exists():
        raise TraceNotFoundError(f"{root}: no such trace directory")
    if not root.is_dir():
        raise TraceError(f"{root}: not a directory, so not a spiketrace trace")
    manifests = {}
    for path in sorted(root.iterdir()):
        rank = layout.manifest_rank(path)
        if rank is None:
            continue
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise TraceError(f"{path}: unreadable manifest ({_first_line(exc)})") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT_MARKER:
            raise TraceError(f"{path}: not a spiketrace manifest (format is not {layout.FORMAT_MARKER!r})")
        _check_version(manifest.get("schema_version"), path)
        if manifest.get("rank", rank) != rank:
            raise TraceError(f"{path}: manifest says rank {manifest.get('rank')}, its name says rank {rank}")
        manifests[rank] = manifest
    if not manifests:
        raise TraceError(f"{root}: no {layout.MANIFEST_NAME} found; not a spiketrace trace")
    return manifests


def check_part(path: Path, table: str) -> int:
    """The row count of the part at `path`, after checking its footer belongs to `table`."""
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{path}: not a readable Parquet file ({_first_line(exc)})") from exc
    keys = metadata.metadata or {}
    version = keys.get(layout.METADATA_VERSION_KEY)
    if version is None:
        raise TraceError(f"{path}: not a spiketrace part (no {layout.METADATA_VERSION_KEY.decode()} in its metadata)")
    _check_version(version.decode(errors="replace"), path)
    written_as = keys.get(layout.METADATA_TABLE_KEY, b"").decode(errors="replace")
    if written_as != table:
        raise TraceError(f"{path}: holds table {written_as!r}, but lies in the directory of table {table!r}")
    return metadata.num_rows


def find_parts(root: Path, manifests: dict[int, dict], warnings: list[str]) -> dict[str, list[Part]]:
    """table -> its checked parts on disk, ordered by rank then name; appends to `warnings`."""
    parts: dict[str, list[Part]] = {table: [] for table in TABLES}
    for leftover in sorted(root.rglob(f"*{layout.TMP_SUFFIX}")):
        warnings.append(f"{leftover}: unfinished temporary file (ignored)")
    for entry in sorted(root.iterdir()):
        if entry.is_dir() and entry.name not in TABLES:
            warnings.append(f"{entry}: unknown table directory (ignored)")
    for table in TABLES:
        for directory in sorted((root / table).glob("rank=*")):
            if _directory_rank(directory) not in manifests:
                warnings.append(f"{directory}: no manifest for this rank (ignored)")
        for rank, manifest in sorted(manifests.items()):
            directory = layout.part_dir(root, table, rank)
            paths = sorted(directory.glob(f"part-*{layout.PART_SUFFIX}"))
            complete = manifest.get("status") == COMPLETE
            if complete and not paths:
                # Tables added by a newer minor version are absent from older traces.
                if parse_version(manifest["schema_version"]) >= parse_version(SCHEMA_VERSION):
                    raise TraceError(f"{directory}: missing, but the trace is complete (every table has a part)")
                warnings.append(f"{directory}: missing (older schema {manifest['schema_version']}); reads as empty")
            listed = {root / name for name in manifest.get("parts", {}).get(table, [])}
            missing = sorted(listed - set(paths))
            if complete and missing:
                raise TraceError(f"{missing[0]}: listed in the manifest of a complete trace, but missing")
            parts[table] += [Part(path, table, rank, check_part(path, table)) for path in paths]
    return parts


def open_trace(path: str | os.PathLike, *, threads: int = 2, memory_limit: str = "1GB") -> Trace:
    """Open and check the trace at `path`; raises TraceError naming the file at fault."""
    root = Path(path)
    manifests = read_manifests(root)
    warnings: list[str] = []
    for rank, manifest in sorted(manifests.items()):
        if manifest.get("status") != COMPLETE:
            warnings.append(
                f"rank {rank}: trace status is {manifest.get('status')!r}, not complete "
                "(the capturing process probably died); only flushed rows are present"
            )
    if len({m.get("schema_version") for m in manifests.values()}) > 1:
        versions = {rank: m.get("schema_version") for rank, m in sorted(manifests.items())}
        warnings.append(f"ranks were written with different schema versions: {versions}")
    world_size = max(int(m.get("world_size") or 1) for m in manifests.values())
    if len(manifests) < world_size:
        warnings.append(f"world size is {world_size} but only ranks {sorted(manifests)} have a manifest")
    parts = find_parts(root, manifests, warnings)
    return Trace(root, manifests, parts, warnings, threads=threads, memory_limit=memory_limit)


class Trace:
    """An opened trace: its manifests, its parts, and a DuckDB connection with its views."""

    def __init__(
        self, path: Path, manifests: dict[int, dict], parts: dict[str, list[Part]], warnings: list[str], *,
        threads: int = 2, memory_limit: str = "1GB",
    ) -> None:
        self.path = path
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
        self.con.execute(f"SET temp_directory = '{Path(tempfile.gettempdir()) / 'spiketrace-duckdb'}'")
        create_views(self.con, path, {table: [p.path for p in ps] for table, ps in parts.items()})

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
        """Deep checks of the rows; the problems found, one line each (empty when sound)."""
        return find_problems(self.con, self.manifests, self.parts)

    def summary(self) -> dict:
        """What `spiketrace info` shows: manifest facts and headline counts (JSON-ready)."""
        statuses = {rank: m.get("status") for rank, m in self.manifests.items()}
        started = [m.get("started_at") for m in self.manifests.values()]
        ended = [m.get("ended_at") for m in self.manifests.values()]
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
        }

    def op_counts(self) -> pd.DataFrame:
        """Every op seen, with its number of events (all ranks), most frequent first."""
        return self.sql(OP_COUNTS_QUERY)

    def stages(self) -> pd.DataFrame:
        """The `stages` view, in record order."""
        return self.sql(STAGES_QUERY)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
