"""Coalescing a rank's many small committed parts into a few larger ones, atomically.

A capture with small flushes (`flush_events=64`, or `flush_bytes` hit often) commits
thousands of tiny parts per table, and every reader pays per part: a footer read, a checksum,
a file in DuckDB's scan. Compaction rewrites runs of consecutive small parts of a table as one
part each, then commits the new list in one atomic manifest rewrite, then removes the parts it
replaced. Like a flush it is a commit: a reader, or a kill, at any instant sees either the
old parts or the new ones, never both or neither (a kill after the commit leaves the old files
as uncommitted leftovers, reported and never read). Every part is checked against its
committed checksum before its rows are merged, so damage is never laundered into a freshly
checksummed part; the merged parts get checksums of their own.

Rows keep their order: parts merge only with their neighbours in commit order. The writer
compacts parts below `small_bytes` at close (TraceWriter.close); `spiketrace compact TRACE`
does the same for a finished trace, with a larger threshold. Pure pyarrow (no torch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spiketrace.schemas import layout
from spiketrace.schemas.safe_files import checksum_of_file

TARGET_BYTES = 16 << 20  # compressed bytes of a merged part: a bounded read and rewrite
AT_CLOSE_SMALL_BYTES = 1 << 20  # parts the writer merges at close: those of small flushes
MIN_RUN = 2


class CompactionError(RuntimeError):
    """A part could not be merged (damaged, unreadable); nothing was changed."""


def plan(entries: list[dict], small_bytes: int, target_bytes: int = TARGET_BYTES) -> list[range]:
    """Runs of consecutive entries below `small_bytes`, each run's total within `target_bytes`,
    that are worth merging (at least MIN_RUN parts)."""
    runs, start, total = [], None, 0
    for index, entry in enumerate([*entries, None]):
        if entry is not None and entry["bytes"] < small_bytes and (start is None or total + entry["bytes"] <= target_bytes):
            if start is None:
                start, total = index, 0
            total += entry["bytes"]
            continue
        if start is not None and index - start >= MIN_RUN:
            runs.append(range(start, index))
        start, total = (index, entry["bytes"]) if entry is not None and entry["bytes"] < small_bytes else (None, 0)
    return runs


def _read_checked(root: Path, entry: dict) -> pa.Table:
    path = root / entry["path"]
    if checksum_of_file(path) != entry[layout.CHECKSUM_NAME]:
        raise CompactionError(f"{path}: checksum mismatch: not merged (run spiketrace validate)")
    return pq.read_table(path)


def _next_index(parts: dict[str, list[dict]]) -> int:
    names = [Path(entry["path"]).name for entries in parts.values() for entry in entries]
    return 1 + max((int(name[len("part-"):-len(layout.PART_SUFFIX)]) for name in names), default=-1)


def compact_rank(root: Path, rank: int, manifest: dict, commit: Callable[[dict], None], write_part,
                 small_bytes: int = AT_CLOSE_SMALL_BYTES, target_bytes: int = TARGET_BYTES) -> tuple[int, int]:
    """Merge `manifest`'s small parts (schema-1.2 entries), commit the new list with `commit`
    (an atomic manifest write), then remove the replaced files. `write_part` is
    spiketrace.capture.store.writer.write_part. Returns (parts before, parts after). On any error before the
    commit, the parts it wrote are removed and the manifest is left as it was."""
    parts = manifest["parts"]
    before = sum(len(entries) for entries in parts.values())
    new_parts = {table: list(entries) for table, entries in parts.items()}
    written: list[Path] = []
    replaced: list[Path] = []
    index = _next_index(parts)
    try:
        for table, entries in parts.items():
            merged_list = []
            position = 0
            for run in plan(entries, small_bytes, target_bytes):
                merged_list += entries[position:run.start]
                tables = [_read_checked(root, entries[i]) for i in run]
                merged = pa.concat_tables(tables, promote_options="default")
                path, entry = write_part(root, table, rank, index, merged, manifest["run_id"])
                index += 1
                written.append(path)
                replaced += [root / entries[i]["path"] for i in run]
                merged_list.append(entry)
                position = run.stop
            new_parts[table] = merged_list + entries[position:]
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    if not written:
        return before, before
    old = {table: list(entries) for table, entries in parts.items()}
    parts.update(new_parts)
    try:
        commit(manifest)
    except BaseException:
        parts.update(old)
        for path in written:
            path.unlink(missing_ok=True)
        raise
    for path in replaced:  # committed away: ours to remove
        path.unlink(missing_ok=True)
    return before, sum(len(entries) for entries in parts.values())
