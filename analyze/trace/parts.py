"""A trace's committed parts: listed by the manifests, each checked before any row is read.

The manifest is the commit log (schemas/layout.py): only the parts it lists are read, so a
flush interrupted by a kill, or one still being written while we read, is invisible; a file
it does not list is reported as a leftover. Every committed part is checked on open, cheaply:
it must be a regular file (never a link or a FIFO) at the place its table and rank say, of
the size the manifest recorded, whose Parquet footer names its table, schema version and run,
holds the committed row count, and has every required column with its type. With `verify`
the whole file's BLAKE2b is compared with the committed checksum too (it reads every byte, so
it takes time in proportion to the trace's size), which catches a flipped bit that still decodes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spiketrace.analyze.trace.manifest import COMPLETE, TraceError, check_version, first_line
from spiketrace.schemas import layout
from spiketrace.schemas.safe_files import UnsafeFileError, check_plain_directory, checksum_of_handle, open_regular
from spiketrace.schemas.tables import TABLES
from spiketrace.schemas.version import SCHEMA_VERSION, added_after, parse_version

LEFTOVERS_SHOWN = 5  # leftover files named one by one; the rest are counted


class PartVanishedError(TraceError):
    """A committed part is missing: damage, unless a newer manifest no longer lists it (the
    capture compacted its parts meanwhile, or a new run started), which open_trace retries."""


@dataclass(frozen=True)
class Part:
    path: Path
    table: str
    rank: int
    rows: int
    bytes: int | None = None
    checksum: str | None = None  # BLAKE2b hex as committed; None in 1.0/1.1 traces


def _plain(schema_type: pa.DataType) -> pa.DataType:
    return schema_type.value_type if pa.types.is_dictionary(schema_type) else schema_type


def schema_problem(found: pa.Schema, table: str, version: str) -> str | None:
    """None if `found` has every column of `table` that schema `version` has, each with its
    type; else the first problem, naming the column. A column a later minor added may be
    missing (it reads as NULL); any other missing column would read as NULL and change numbers."""
    for expected in TABLES[table]:
        index = found.get_field_index(expected.name)
        if index < 0:
            if not added_after(table, expected.name, version):
                return f"column {expected.name}: missing (schema {version} has it)"
            continue
        have = _plain(found.field(index).type)
        if have != _plain(expected.type):
            return f"column {expected.name}: {have}, expected {_plain(expected.type)}"
    return None


def check_part(path: Path, table: str, *, rows: int | None = None, size: int | None = None,
               checksum: str | None = None, run_id: str | None = None, verify: bool = False) -> int:
    """The row count of the part at `path`, after the checks in the module docstring."""
    try:
        fd = open_regular(path)
    except UnsafeFileError as exc:
        raise TraceError(str(exc)) from exc
    except FileNotFoundError as exc:
        raise PartVanishedError(f"{path}: committed in the manifest, but missing") from exc
    except OSError as exc:
        raise TraceError(f"{path}: unreadable ({first_line(exc)})") from exc
    with os.fdopen(fd, "rb") as handle:
        found_size = os.fstat(handle.fileno()).st_size
        if size is not None and found_size != size:
            raise TraceError(f"{path}: {found_size} bytes, but {size} were committed (truncated or overwritten)")
        try:
            metadata = pq.read_metadata(handle)
        except (OSError, pa.ArrowException) as exc:
            raise TraceError(f"{path}: not a readable Parquet file ({first_line(exc)})") from exc
        keys = metadata.metadata or {}
        version = keys.get(layout.METADATA_VERSION_KEY)
        if version is None:
            raise TraceError(f"{path}: not a spiketrace part (no {layout.METADATA_VERSION_KEY.decode()} in its metadata)")
        check_version(version.decode(errors="replace"), path)
        written_as = keys.get(layout.METADATA_TABLE_KEY, b"").decode(errors="replace")
        if written_as != table:
            raise TraceError(f"{path}: holds table {written_as!r}, but lies in the directory of table {table!r}")
        part_run = keys.get(layout.METADATA_RUN_KEY)
        if run_id is not None and part_run is not None and part_run.decode(errors="replace") != run_id:
            raise TraceError(f"{path}: written by run {part_run.decode(errors='replace')}, not by this trace's run {run_id}")
        if rows is not None and metadata.num_rows != rows:
            raise TraceError(f"{path}: holds {metadata.num_rows} rows, but {rows} were committed")
        try:
            problem = schema_problem(metadata.schema.to_arrow_schema(), table, version.decode())
        except (pa.ArrowException, ValueError) as exc:
            problem = f"unreadable schema ({first_line(exc)})"
        if problem:
            raise TraceError(f"{path}: {problem}")
        if verify and checksum is not None and checksum_of_handle(handle) != checksum:  # the file opened above
            raise TraceError(f"{path}: checksum mismatch: the file changed after it was committed (damaged)")
    return metadata.num_rows


def _committed_part(root: Path, manifest_file: Path, table: str, rank: int, entry, run_id, verify: bool) -> Part:
    relative = entry if isinstance(entry, str) else entry["path"]
    place = f"{table}/rank={rank}/"
    if not relative.startswith(place) or not layout.is_part_name(relative[len(place):]):
        raise TraceError(f"{manifest_file}: part {relative!r} is not a part of table {table}, rank {rank}")
    try:
        check_plain_directory(root / table)
        check_plain_directory(root / place)
    except UnsafeFileError as exc:
        raise TraceError(str(exc)) from exc
    path = root / relative
    if isinstance(entry, str):  # schema 1.0/1.1: names only
        return Part(path, table, rank, check_part(path, table, verify=verify))
    rows = check_part(path, table, rows=entry["rows"], size=entry["bytes"], checksum=entry[layout.CHECKSUM_NAME],
                      run_id=run_id, verify=verify)
    return Part(path, table, rank, rows, entry["bytes"], entry[layout.CHECKSUM_NAME])


def _leftovers(root: Path, manifests: dict[int, dict], committed: set[Path], warnings: list[str]) -> None:
    """Warn about what lies in the trace but is not committed: never read."""
    found: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.name.endswith(layout.TMP_SUFFIX):
            found.append(f"{entry.path}: unfinished temporary file")
        elif entry.is_dir(follow_symlinks=False) and entry.name not in TABLES:
            warnings.append(f"{entry.path}: unknown table directory (ignored)")
    for table in TABLES:
        try:
            if not check_plain_directory(root / table):
                continue
        except UnsafeFileError as exc:
            warnings.append(f"{exc} (ignored)")
            continue
        for directory in sorted(os.scandir(root / table), key=lambda e: e.name):
            rank = directory.name.removeprefix("rank=")
            if not (rank.isdigit() and int(rank) in manifests):
                warnings.append(f"{directory.path}: no manifest for this rank (ignored)")
                continue
            if not directory.is_dir(follow_symlinks=False):
                warnings.append(f"{directory.path}: not a real directory (ignored)")
                continue
            found += [f"{file.path}: not committed (an interrupted flush, or not spiketrace's)"
                      for file in sorted(os.scandir(directory.path), key=lambda e: e.name)
                      if Path(file.path) not in committed]
    shown = found[:LEFTOVERS_SHOWN]
    more = f" (and {len(found) - len(shown)} more files)" if len(found) > len(shown) else ""
    warnings += [f"{line} (ignored){more if i == len(shown) - 1 else ''}" for i, line in enumerate(shown)]


def find_parts(root: Path, manifests: dict[int, dict], warnings: list[str], *,
               verify: bool = False) -> dict[str, list[Part]]:
    """table -> its committed, checked parts, ordered by rank then commit; appends to `warnings`."""
    parts: dict[str, list[Part]] = {table: [] for table in TABLES}
    for rank, manifest in sorted(manifests.items()):
        manifest_file = layout.manifest_path(root, rank)
        committed = manifest.get("parts", {})
        for table in sorted(set(committed) - set(TABLES)):
            warnings.append(f"{manifest_file}: parts of unknown table {table!r} (written by a newer version; ignored)")
        for table in TABLES:
            entries = committed.get(table, [])
            if manifest.get("status") == COMPLETE and not entries:
                # Tables added by a newer minor version are absent from older traces.
                if parse_version(manifest["schema_version"]) >= parse_version(SCHEMA_VERSION):
                    raise TraceError(f"{layout.part_dir(root, table, rank)}: missing, but the trace is complete "
                                     "(every table has a part)")
                warnings.append(f"{layout.part_dir(root, table, rank)}: missing (older schema {manifest['schema_version']}); "
                                "reads as empty")
            parts[table] += [
                _committed_part(root, manifest_file, table, rank, entry, manifest.get("run_id"), verify)
                for entry in entries
            ]
    _leftovers(root, manifests, {part.path for ps in parts.values() for part in ps}, warnings)
    return parts
