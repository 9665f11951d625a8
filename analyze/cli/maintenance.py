"""Commands that change a trace's files: compact.

`compact` merges each rank's runs of small committed parts into larger parts and commits the
new list atomically (capture/store/compaction.py, the same code a capture runs at close): parts are
checked against their checksums before merging, numbers are unchanged, and a reader opening
the trace meanwhile sees the old list or the new one. A trace still being captured (status
`running`) is refused: its writer owns the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from spiketrace.analyze.cli.app import _fail, main
from spiketrace.analyze.present.units import human_bytes
from spiketrace.analyze.trace.manifest import COMPLETE, read_manifests
from spiketrace.schemas import layout

DEFAULT_SMALL_MB = 8


def compact_trace(root: Path, small_bytes: int, run: str | None = None) -> dict[int, tuple[int, int]]:
    """rank -> (parts before, parts after) of compacting every rank of the trace at `root`."""
    from spiketrace.capture.store.compaction import compact_rank
    from spiketrace.capture.store.writer import atomic_write_text, write_part

    manifests = read_manifests(root, run)
    for rank, manifest in manifests.items():
        if manifest["status"] != COMPLETE:
            raise click.UsageError(f"{layout.manifest_path(root, rank)}: status {manifest['status']!r}; "
                                   "only a finished capture can be compacted")
        if any(isinstance(entry, str) for entries in manifest["parts"].values() for entry in entries):
            raise click.UsageError(f"{layout.manifest_path(root, rank)}: schema {manifest['schema_version']} "
                                   "commits no checksums; only traces of schema 1.2 or later can be compacted")
    done = {}
    for rank, manifest in sorted(manifests.items()):
        path = layout.manifest_path(root, rank)

        def commit(new_manifest: dict, path: Path = path) -> None:
            atomic_write_text(path, json.dumps(new_manifest, indent=1))

        done[rank] = compact_rank(root, rank, manifest, commit, write_part, small_bytes=small_bytes)
    return done


@main.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--small-mb", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_SMALL_MB, show_default=True,
              help="Merge parts smaller than this many MB (into parts of up to 16 MB).")
@click.option("--run", "run_id", metavar="ID", default=None, help="The run to compact, in a directory holding several.")
def compact(trace_path: str, small_mb: float, run_id: str | None) -> None:
    """Merge TRACE's small committed parts into few, atomically.

    Example: spiketrace compact runs/long --small-mb 8"""
    root = Path(trace_path)
    before_bytes = sum(p.stat().st_size for p in root.rglob(f"*{layout.PART_SUFFIX}") if p.is_file())
    try:
        done = compact_trace(root, int(small_mb * (1 << 20)), run_id)
    except click.UsageError as exc:
        _fail(exc.message, 2)
    after_bytes = sum(p.stat().st_size for p in root.rglob(f"*{layout.PART_SUFFIX}") if p.is_file())
    for rank, (before, after) in done.items():
        click.echo(f"rank {rank}: {before} parts -> {after}")
    click.echo(f"{human_bytes(before_bytes)} -> {human_bytes(after_bytes)} of parts")
