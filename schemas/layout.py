"""Where the files of a trace live. Both the writer (capture) and the reader (analyze) use this.

    TRACE/
      manifest.json                    rank 0's manifest (manifest.rank=R.json for rank R > 0)
      <table>/rank=R/part-00000.parquet one Parquet dataset per table, hive-partitioned by rank

The manifest is the trace's commit log (as in Delta Lake or Iceberg): a flush writes its
parts (created exclusively, never through a symlink), then commits them all in one atomic
manifest rewrite that lists, per table, each part with its row count, byte size and BLAKE2b
checksum (schema 1.2; 1.0/1.1 manifests list bare names). Readers read committed parts only,
so a reader sees a whole flush or none of it, during a capture or after a crash at any
instant; a file the manifest does not list is a leftover, reported and never read.
Every manifest and part carries the capture's run id, so shards of an older run left in the
same directory are told apart from the current run's.
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
METADATA_RUN_KEY = b"spiketrace.run_id"
CHECKSUM_NAME = "blake2b"  # hashlib.blake2b, 32-byte digest, of the whole file
CHECKSUM_DIGEST_SIZE = 32

_MANIFEST_RE = re.compile(r"^manifest(?:\.rank=(\d+))?\.json$")


def manifest_path(root: Path, rank: int) -> Path:
    return root / (MANIFEST_NAME if rank == 0 else f"manifest.rank={rank}.json")


def manifest_rank(path: Path) -> int | None:
    """The rank a manifest file belongs to, or None if the name is not a manifest's."""
    match = _MANIFEST_RE.match(path.name)
    if match is None:
        return None
    return int(match.group(1) or 0)


def holds_manifest(directory: Path) -> bool:
    """`directory` is a directory with a rank's manifest in it: a trace, by its names."""
    return directory.is_dir() and any(manifest_rank(child) is not None for child in directory.iterdir())


def part_dir(root: Path, table: str, rank: int) -> Path:
    return root / table / f"rank={rank}"


def part_name(index: int) -> str:
    return f"part-{index:05d}{PART_SUFFIX}"


_PART_RE = re.compile(r"^part-\d{5,}\.parquet$")


def is_part_name(name: str) -> bool:
    """A name the writer gives a part (part-00012.parquet)."""
    return _PART_RE.match(name) is not None


def temporary_name(name: str, unique: str) -> str:
    """The name a file is written under before its atomic rename: unique per writer and
    write, so it is always created afresh (O_EXCL) and never an existing file or link."""
    return f"{name}.{unique}{TMP_SUFFIX}"
