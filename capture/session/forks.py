"""A process forked while a Recorder is open never records, and never touches its trace.

`os.fork()`, and what forks (multiprocessing's "fork" start method, DataLoader workers started
with it), copies the whole open capture into the child: the dispatch mode on the forking
thread's mode stack, the global module hooks, the writer with its buffered rows and its part
numbering. Left alone, the child records its own ops and flushes them under the parent's part
names, and the parent's next flush finds its names taken. So every fork is met at the fork
itself (`os.register_at_fork`, registered once per process), for every open Recorder (a weak
set, so a Recorder never closed is not kept alive by it):

- In the child, each Recorder stops recording at once and for good (Recorder._inherited_by_fork):
  `recording` is off, the module hooks leave torch, and the dispatch mode leaves at the child's
  next `step()`, as between a schedule's recorded steps (until then it passes each op through).
  The child's run goes on as a plain process's would, its `stage()`, `step()` and the rest of
  the `with` block included; no `on_trace_ready` is called there.
- The writer refuses to write, rename or remove anything from a process other than the one that
  created it (TraceWriter.inherited, a pid check that holds even where this hook did not run):
  no flush, no manifest, no compaction, not at the child's `Recorder.__exit__` either.
- In the parent, the manifest's `forked_children` counts the processes forked while the trace
  was open (written with its next manifest write): their ops are in no trace.

Pure Python (no torch).
"""

from __future__ import annotations

import os
import weakref

_open: weakref.WeakSet = weakref.WeakSet()  # the Recorders open in this process
_registered = False  # the at-fork handlers are registered (a fork's child inherits them)


def watch(recorder) -> None:
    """Meet every fork from now until `forget(recorder)`: the recorder's manifest holds the
    key `forked_children` already (updated in place, never added, while another thread may be
    writing the manifest)."""
    global _registered
    if not _registered:
        os.register_at_fork(after_in_parent=_after_in_parent, after_in_child=_after_in_child)
        _registered = True
    _open.add(recorder)


def forget(recorder) -> None:
    _open.discard(recorder)


def never(step: int) -> bool:
    """The schedule of a capture a fork inherited: no step is recorded."""
    return False


def _after_in_child() -> None:
    for recorder in list(_open):
        try:
            recorder._inherited_by_fork()
        except Exception:  # noqa: BLE001 - the child's run goes on; its writer writes nothing anyway
            pass


def _after_in_parent() -> None:
    for recorder in list(_open):
        try:
            recorder.writer.manifest["forked_children"] += 1
        except Exception:  # noqa: BLE001 - a count for the manifest is not worth the user's fork
            pass
