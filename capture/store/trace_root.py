"""Where a rank's trace goes: a directory made ready without touching what is not ours.

A trace directory may be shared by every rank of a job (all starting at once) and may have
been prepared by someone else. So start-up creates the directory if needed, accepts the other
ranks' files in any stage of being written, refuses a directory that is not a trace (a typo
must never overwrite unrelated data), refuses links and special files where this rank's files
go (a link would make the writer delete or overwrite a file outside the trace), and removes
only regular files named as this rank's own parts and manifest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from spiketrace.schemas import layout
from spiketrace.schemas.safe_files import UnsafeFileError, check_plain_directory, kind_of, read_regular
from spiketrace.schemas.tables import TABLES


class TracePathError(ValueError):
    """The target path cannot hold a new trace."""


def _written_by_spiketrace(name: str) -> bool:
    """A name a trace writer creates in a trace root: a manifest, a table directory, or the
    temporary file of a manifest being written (manifest.rank=1.json.<unique>.tmp)."""
    if name.endswith(layout.TMP_SUFFIX) and ".json" in name:
        name = name[: name.index(".json") + len(".json")]
    return name in TABLES or layout.manifest_rank(Path(name)) is not None


MANIFEST_LIMIT = 1 << 28  # bytes; a manifest listing a million parts stays well below


def _is_trace_manifest(path: Path) -> bool:
    """`path` is a regular file holding a spiketrace manifest (of this or any version)."""
    try:
        manifest = json.loads(read_regular(path, MANIFEST_LIMIT))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == layout.FORMAT_MARKER


def _refuse(root: Path, problem: str) -> TracePathError:
    return TracePathError(f"{problem}; choose an empty or new path for the trace ({root})")


def _is_own_part_file(name: str) -> bool:
    """A part's name, or the temporary name an older writer gave a part being written."""
    if name.endswith(layout.TMP_SUFFIX) and layout.PART_SUFFIX in name:
        name = name[: name.index(layout.PART_SUFFIX) + len(layout.PART_SUFFIX)]
    return layout.is_part_name(name)


def _clear_rank_directory(root: Path, directory: Path) -> None:
    """Remove this rank's old parts from `directory`: regular files named as parts only."""
    try:
        if not check_plain_directory(directory):
            return
    except UnsafeFileError as exc:
        raise _refuse(root, str(exc)) from exc
    for entry in os.scandir(directory):
        mode = entry.stat(follow_symlinks=False).st_mode
        if not (_is_own_part_file(entry.name) and entry.is_file(follow_symlinks=False)):
            what = "a file" if entry.is_file(follow_symlinks=False) else kind_of(mode)
            raise _refuse(root, f"{entry.path}: {what} that spiketrace did not write")
        os.unlink(entry.path)
    os.rmdir(directory)  # emptied above: only what was this rank's


def prepare_root(root: Path, rank: int) -> None:
    """Make `root` ready for this rank: create it, or clear this rank's old trace files in it.

    Refuses a path that exists and is neither a directory holding only spiketrace files (or
    a spiketrace manifest) nor empty, so a typo never overwrites unrelated data; refuses a
    link or special file where this rank's files go, a manifest that is not one, and a file
    it did not write among this rank's parts. Race-free when all ranks start at once:
    creation tolerates the directory existing, the check accepts another rank's files in any
    stage of being written (a manifest's temporary file, a table directory before any
    manifest; a manifest itself appears whole, by rename), and only this rank's own files
    are removed.
    """
    if root.exists() and not root.is_dir():
        raise TracePathError(f"{root}: exists and is not a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise TracePathError(f"{root}: cannot create the trace directory ({exc.strerror or exc})") from exc
    names = os.listdir(root)
    manifests = [root / name for name in names if layout.manifest_rank(Path(name)) is not None]
    garbage = [path for path in manifests if not _is_trace_manifest(path)]
    if garbage:
        raise _refuse(root, f"{garbage[0]}: not a spiketrace manifest (unreadable, a link or special file, or no format marker)")
    foreign = [name for name in names if not _written_by_spiketrace(name)]
    if foreign and not manifests:
        raise _refuse(root, f"{root}: directory is not empty and is not a spiketrace trace (it holds {foreign[0]!r})")
    own_manifest = layout.manifest_path(root, rank).name
    for name in names:  # this rank's manifest and its leftover temporary files
        path = root / name
        if name == own_manifest or (name.startswith(own_manifest + ".") and name.endswith(layout.TMP_SUFFIX)):
            if path.is_symlink() or not path.is_file():
                raise _refuse(root, f"{path}: a link or special file where this rank's manifest goes")
            path.unlink(missing_ok=True)
    for table in TABLES:
        try:
            if not check_plain_directory(root / table):
                continue
        except UnsafeFileError as exc:
            raise _refuse(root, str(exc)) from exc
        _clear_rank_directory(root, layout.part_dir(root, table, rank))


