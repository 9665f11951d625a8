"""A trace's manifests: read safely, parsed by their schema, version-checked, one run chosen.

Nothing here reads rows. A manifest is read without following links or blocking on a FIFO
(schemas/safe_files.py), parsed by analyze/trace/manifest_model.py, and checked for a schema
version this reader understands, so a damaged, hostile or incompatible trace fails at once
with a one-line message naming the file (and the field).

Every manifest names the capture run that wrote it (`run_id`, schema 1.2). A root holding
shards of several runs (a 1-process run written where a 2-rank run was) is refused, naming
the stale ranks, unless the caller picks one run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from spiketrace.analyze.trace.manifest_model import check_manifest
from spiketrace.schemas import layout
from spiketrace.schemas.safe_files import UnsafeFileError, read_regular
from spiketrace.schemas.version import SchemaVersionError, check_readable

COMPLETE = "complete"
MANIFEST_LIMIT = 1 << 28  # bytes; a manifest listing 100k parts per table stays far below


class TraceError(ValueError):
    """A trace cannot be opened: its message is one line naming the offending file."""


class TraceVersionError(TraceError, SchemaVersionError):
    """A manifest or part was written with a schema version this reader cannot read."""


class TraceNotFoundError(TraceError, FileNotFoundError):
    """The trace path does not exist."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_version(found, where: Path) -> None:
    try:
        check_readable(found, str(where))
    except SchemaVersionError as exc:
        message = str(exc)  # a malformed version's message does not name the file
        raise TraceVersionError(message if str(where) in message else f"{where}: {message}") from exc


def load_manifest(path: Path, rank: int) -> dict:
    """The manifest at `path` as a dict, after every check in the module docstring."""
    try:
        manifest = json.loads(read_regular(path, MANIFEST_LIMIT))
    except UnsafeFileError as exc:
        raise TraceError(str(exc)) from exc
    except (OSError, ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: unreadable manifest ({first_line(exc)})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT_MARKER:
        raise TraceError(f"{path}: not a spiketrace manifest (format is not {layout.FORMAT_MARKER!r})")
    check_version(manifest.get("schema_version"), path)
    problem = check_manifest(manifest)
    if problem is not None:
        raise TraceError(f"{path}: {problem}")
    if manifest["rank"] != rank:
        raise TraceError(f"{path}: manifest says rank {manifest['rank']}, its name says rank {rank}")
    return manifest


def _describe_run(run_id, ranks: list[int], manifests: dict[int, dict]) -> str:
    started = min((manifests[r].get("started_at") or 0) for r in ranks)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if started else "unknown time"
    return f"run {run_id or '(unnamed)'} (ranks {ranks}, started {when})"


def choose_run(root: Path, manifests: dict[int, dict], run: str | None, warnings: list[str]) -> dict[int, dict]:
    """The manifests of one run: `run` (an id or a unique prefix of one), else the only one."""
    runs: dict[str | None, list[int]] = {}
    for rank, manifest in sorted(manifests.items()):
        runs.setdefault(manifest.get("run_id"), []).append(rank)
    if run is None:
        if len(runs) == 1:
            return manifests
        latest = max(runs, key=lambda r: max((manifests[k].get("started_at") or 0) for k in runs[r]))
        stale = sorted(rank for run_id, ranks in runs.items() if run_id != latest for rank in ranks)
        others = "; ".join(_describe_run(r, ranks, manifests) for r, ranks in runs.items() if r != latest)
        raise TraceError(
            f"{root}: holds shards of {len(runs)} capture runs: ranks {stale} are stale ({others}), the latest is "
            f"{_describe_run(latest, runs[latest], manifests)}; pick one with run='ID' (CLI: --run ID)"
        )
    chosen = [run_id for run_id in runs if run_id is not None and run_id.startswith(run)]
    if len(chosen) != 1:
        listed = ", ".join(_describe_run(r, ranks, manifests) for r, ranks in runs.items())
        problem = "matches no run" if not chosen else "matches several runs"
        raise TraceError(f"{root}: run {run!r} {problem}; runs here: {listed}")
    kept = {rank: m for rank, m in manifests.items() if m.get("run_id") == chosen[0]}
    for run_id, ranks in runs.items():
        if run_id != chosen[0]:
            warnings.append(f"ignored {_describe_run(run_id, ranks, manifests)}: not the chosen run")
    return kept


def read_manifests(root: Path, run: str | None = None, warnings: list[str] | None = None) -> dict[int, dict]:
    """rank -> manifest of every rank of the trace at `root` (of one run), each checked."""
    if not root.exists():
        raise TraceNotFoundError(f"{root}: no such trace directory")
    if not root.is_dir():
        raise TraceError(f"{root}: not a directory, so not a spiketrace trace")
    manifests = {}
    for path in sorted(root.iterdir()):
        rank = layout.manifest_rank(path)
        if rank is not None:
            manifests[rank] = load_manifest(path, rank)
    if not manifests:
        raise TraceError(f"{root}: no {layout.MANIFEST_NAME} found; not a spiketrace trace")
    return choose_run(root, manifests, run, [] if warnings is None else warnings)
