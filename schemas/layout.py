"""Where the files of a trace live. Both the writer (capture) and the reader (analyze) use this.

    TRACE/
      manifest.json                    rank 0's manifest (manifest.rank=R.json for rank R > 0)
      <table>/rank=R/part-00000.parquet one Parquet dataset per table, hive-partitioned by rank

A part is written to `<name>.tmp` and renamed, so a part that exists under its final name was
complete when written. The manifest is rewritten atomically after every flush.
"""

from __future__ import annotations

import re
from pathlib import Path

MANIFEST_NAME = "manifest.json"
PART_SUFFIX = ".parquet"
TMP_SUFFIX = ".tmp"
FORMAT_MARKER = "spiketrace-trace"
# The key under which every Parquet file carries its schema version and table name.
METADATA_VERSION_KEY = b"spiketrace.schema_version"
METADATA_TABLE_KEY = b"spiketrace.table"

_MANIFEST_RE = re.compile(r"^manifest(?:\.rank=(\d+))?\.json$")


def manifest_path(root: Path, rank: int) -> Path:
    return root / (MANIFEST_NAME if rank == 0 else f"manifest.rank={rank}.json")


def manifest_rank(path: Path) -> int | None:
    """The rank a manifest file belongs to, or None if the name is not a manifest's."""
    match = _MANIFEST_RE.match(path.name)
    if match is None:
        return None
    return int(match.group(1) or 0)


def part_dir(root: Path, table: str, rank: int) -> Path:
    return root / table / f"rank={rank}"


def part_name(index: int) -> str:
    return f"part-{index:05d}{PART_SUFFIX}"
