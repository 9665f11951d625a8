"""The trace schema version and the rule that decides which traces a reader accepts.

Evolution is additive only: a minor bump adds nullable columns or tables, a major bump is
reserved for a change old readers cannot understand. A reader therefore accepts any trace of
its own major version (older minors get the new columns as NULL) and refuses a newer major.
"""

from __future__ import annotations

# The distribution's version, its one source: pyproject.toml reads it (setuptools' attr, without
# importing), `spiketrace --version` prints it and every trace's manifest records it. A release
# adds its entry to CHANGELOG.md and CITATION.cff's version (tests/test_package_files.py).
__version__ = "0.1.0"

SCHEMA_VERSION = "1.5"
# 1.1: events.recompute, module_events.recompute, the collectives table.
# 1.2: the manifest is a commit log: each part listed with rows, bytes and checksum; run_id.
# 1.3: op_stats values of new statistics (no new column): the NeuroBench pair counts and
#      x_ternary, linear_marginal_dot, and the statistics of conv1d/2d/3d and linear recorded
#      whole (schemas/statistics.py); a 1.2 trace lacks them and the analysis says so.
# 1.4: tensors.nested_shapes; a nested tensor is recorded (null in shape at its ragged
#      dimension, numel its components' total) where 1.3 left out the ops that touched one.
# 1.5: op_stats conv_spike_taps of convolution_backward too (no new column: its weight
#      gradient's accumulates over spikes); a size that is no int in op arguments is
#      {"$symint": ...}; `catalog` entries in degraded. A 1.4 trace lacks those rows: the
#      analysis reports those accumulates as unknown.


# Columns and tables added after 1.0, by the minor that added them: a part written by an older
# minor may lack them (they read as NULL); a part lacking any other column is damaged.
ADDED_IN: dict[tuple[str, str], str] = {
    ("events", "recompute"): "1.1",
    ("module_events", "recompute"): "1.1",
    ("collectives", "*"): "1.1",
    ("tensors", "nested_shapes"): "1.4",
}


def added_after(table: str, column: str, version: str) -> bool:
    """True if `column` of `table` was added by a minor newer than `version`."""
    added = ADDED_IN.get((table, column)) or ADDED_IN.get((table, "*"))
    return added is not None and parse_version(added) > parse_version(version)


class SchemaVersionError(ValueError):
    """A trace was written with a schema this reader cannot read."""


def parse_version(text: str) -> tuple[int, int]:
    try:
        major, minor = (int(part) for part in str(text).split("."))
    except ValueError as exc:
        raise SchemaVersionError(f"malformed schema version {text!r}; expected 'MAJOR.MINOR'") from exc
    return major, minor


def check_readable(found: str, where: str) -> tuple[int, int]:
    """Raise SchemaVersionError unless a trace of schema `found` can be read by this reader."""
    found_major, found_minor = parse_version(found)
    ours_major, _ = parse_version(SCHEMA_VERSION)
    if found_major != ours_major:
        newer = "newer" if found_major > ours_major else "older"
        raise SchemaVersionError(
            f"{where}: trace schema version {found} is a {newer} major version than this "
            f"reader's {SCHEMA_VERSION}; upgrade spiketrace to read it"
            if found_major > ours_major
            else f"{where}: trace schema version {found} is an {newer} major version than this "
            f"reader's {SCHEMA_VERSION}; it cannot be read"
        )
    return found_major, found_minor
