"""Test tools that change a trace's files as a damaged disk, an older writer or a hostile
user would, and, where the test wants the change to pass the commit log, recommit it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from spiketrace.schemas import layout


def manifest_of(part: Path) -> Path:
    """The manifest of the rank whose directory holds `part` (TRACE/table/rank=R/part)."""
    rank = int(part.parent.name.removeprefix("rank="))
    return layout.manifest_path(part.parent.parent.parent, rank)


def _rows(part: Path) -> int:
    try:
        return pq.read_metadata(part).num_rows
    except Exception:  # noqa: BLE001 - garbage committed on purpose
        return 0


def recommit(part: Path) -> None:
    """Make the manifest commit `part` as it is now: rows, bytes and checksum (added to the
    manifest's list of its table if absent, as a writer's commit would; a file that is not
    Parquet is committed with 0 rows)."""
    manifest_file = manifest_of(part)
    manifest = json.loads(manifest_file.read_text())
    root = manifest_file.parent
    relative = part.relative_to(root).as_posix()
    table = part.parent.parent.name
    data = part.read_bytes()
    entry = {"path": relative, "rows": _rows(part), "bytes": len(data),
             layout.CHECKSUM_NAME: hashlib.blake2b(data, digest_size=layout.CHECKSUM_DIGEST_SIZE).hexdigest()}
    entries = manifest["parts"].setdefault(table, [])
    for index, old in enumerate(entries):
        if old["path"] == relative:
            manifest["counts"][table] += entry["rows"] - old["rows"]
            entries[index] = entry
            break
    else:
        entries.append(entry)
        manifest["counts"][table] = manifest["counts"].get(table, 0) + entry["rows"]
    manifest_file.write_text(json.dumps(manifest, indent=1))


def rewrite_part(path: Path, transform=lambda table: table, version=None, *, commit=True) -> None:
    """Rewrite a part through `transform`, keeping its metadata (its version set to
    `version`); recommit it unless `commit` is False (then it reads as damaged)."""
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata)
    if version is not None:
        metadata[layout.METADATA_VERSION_KEY] = version.encode()
    pq.write_table(transform(table).replace_schema_metadata(metadata), path)
    if commit:
        recommit(path)
