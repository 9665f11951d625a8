"""Temporary directories of a reader process, and the ones killed readers left behind.

DuckDB spills what does not fit its memory limit into a directory; a Trace gets one of its
own and removes it on close, but a reader killed with SIGKILL cannot. Each directory's name
carries its owner's pid, so the next reader removes those whose process no longer runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def remove_orphans(prefix: str, directory: str | os.PathLike | None = None) -> list[str]:
    """Remove `<prefix><pid>-*` directories of this user whose process no longer runs; return
    what was removed. Links, files and other users' directories are left alone. Where the
    system has no user ids or no signal 0 to ask whether a process runs (Windows, whose
    os.kill(pid, 0) would send the process a Ctrl+C), nothing is removed: the leftovers stay
    for the system's own temporary-file cleanup."""
    if not hasattr(os, "getuid") or os.name == "nt":
        return []
    removed = []
    for entry in Path(directory or tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = entry.name[len(prefix):].split("-", 1)[0]
        try:
            if not pid.isdigit() or entry.is_symlink() or not entry.is_dir() or entry.lstat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
            continue  # its process still runs
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
        except OSError:
            continue  # another user's process runs under that pid, or the entry vanished
    return removed
