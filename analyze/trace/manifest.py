"""A trace's manifests and committed parts: read, version-checked, listed per table.

Nothing here reads rows: manifests are JSON, parts are checked by their Parquet footer
(schema version and table name), so a damaged or incompatible trace fails at once with a
one-line message naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from schemas import layout
from schemas.tables import TABLES
from schemas.version import SCHEMA_VERSION, SchemaVersionError, check_readable, parse_version

COMPLETE = "complete"


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
