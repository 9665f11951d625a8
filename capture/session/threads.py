"""Ops of other Python threads: recorded in threads started while a Recorder is open, named otherwise.

torch keeps its dispatch mode stack per thread, so the mode a Recorder enters sees the ops of
the thread that opened it and of no other. `ThreadHook.start()` sets threading's profile hook
(`threading.setprofile`), which every thread the threading module starts from then on
(`threading.Thread`, `concurrent.futures.ThreadPoolExecutor` workers, timers) calls before its
`run()`: the hook pushes a RecordingMode of that thread's own onto the thread's stack, sharing
the Recorder's context (the same seq, buffers, registry and lock), and hands the thread on to
the profile function it had before (none, usually), so that thread's calls cost nothing more.
Its events carry its own `thread` value (RecordingContext.thread_index; a thread that reuses
the ident of one that ended gets a new one, except in the compiled record when no other thread
recorded in between: it keeps the value of the ident it saw last). Both record paths, the
compiled handler's and the Python one, write each record under the context's lock, so records
of several threads never interleave; the ops themselves run in parallel, as without capture.

What is shared, process-wide, is the rest of the Recorder's state: the current stage and step,
`suspend()` and the schedule switch every thread's recording together, and module scopes come
from one tracker (capture/modules/tracker.py): a worker's op gets the scope state as it is at that
moment, which concurrent forwards in several threads mix. The module hooks are torch's global
ones, so a forward in any thread, one this module did not reach too, writes module events and
moves the tracker. Between steps a schedule does not record, a worker's mode stays on its stack
and passes each op through.

At close (`stop()`) the hook leaves threading and each worker's mode passes every op through
from then on: it records nothing and writes nothing, and at that thread's next op it takes
itself off the thread's stack (from a profile callback set for that one moment, the only way
to reach another thread's stack), so afterwards the thread's ops cost what they cost before the
Recorder opened. A thread busy with a profiler of its own keeps the pass-through mode instead.

Threads that cannot be reached are named. Python 3.11 has no way to push a mode onto a thread
that already runs, so the threads alive when the Recorder opened (a thread pool started before
it, a loader thread) are not recorded, nor are threads the threading module starts past this
hook (a profile hook set over it). At close the manifest's `unrecorded_threads` lists those of
them that ran while the Recorder was open: each still alive that the kernel saw run meanwhile
(Linux's per-thread scheduler counters, /proc/self/task/<tid>/schedstat; where they cannot be
read, every one), and each that ended meanwhile. Whether they ran torch ops cannot be known
cheaply, so an entry says only that the thread ran and what code it runs; the analysis prints
the caveat. Left out are the service threads in SERVICE_THREADS, whose code is known and runs
no torch op: tqdm's monitor (started by any progress bar, spiketrace's own among them, and
woken every 10 s) and a Jupyter kernel's I/O, heartbeat and history threads would otherwise
put the caveat on every capture in a notebook and teach users to skip it. Threads
started outside the threading module (`_thread.start_new_thread`, C++ threads) are neither
reached nor listed; those torch runs itself (intra-op threads, autograd's device threads, which
run a backward with the modes of the thread it came from) work for a recorded thread.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from functools import partial
from types import MethodType

import torch

from spiketrace.capture.ops import dispatch, dynamo_frames

MANIFEST_KEY = "unrecorded_threads"

# Where a thread's code comes from (module of its Thread subclass, else of its target), for the
# threads known to run no torch op: prefixes of those modules.
SERVICE_THREADS = (
    "tqdm._monitor",  # TMonitor: wakes every 10 s to refresh bars
    "ipykernel.iostream", "ipykernel.heartbeat", "ipykernel.parentpoller",  # a Jupyter kernel's
    "ipykernel.control", "ipykernel.shellchannel",  # ipykernel 7: the control and message-routing threads
    "IPython.core.history",  # HistorySavingThread: writes the input history to sqlite
    "spiketrace.capture.live.analysis",  # LiveAnalysis: hands cycles to its worker process through a pipe
)
_HANDLER_CODE = dispatch.RecordingMode.__torch_dispatch__.__code__


def _scheduled(native_id: int | None) -> tuple | None:
    """The kernel's count of the thread's time on a CPU and of its time slices, or None where
    it cannot be read (not Linux, no such thread)."""
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat") as counters:
            return tuple(counters.read().split()[::2])  # run time (ns), time slices
    except (OSError, ValueError):
        return None


def thread_code(thread: threading.Thread) -> str:
    """'module.qualname' of the code the thread runs: its Thread subclass, else its target
    (read while it runs: Thread.run deletes the target when it returns); '' where unknown."""
    kind = type(thread)
    code = getattr(thread, "_target", None) if kind is threading.Thread else kind
    if code is None:
        return ""
    code = getattr(code, "__func__", code)  # a bound method: its function
    return f"{getattr(code, '__module__', None) or ''}.{getattr(code, '__qualname__', '')}".strip(".")


def is_service(code: str) -> bool:
    return any(code == p or code.startswith(p + ".") for p in SERVICE_THREADS)


def _python_threads() -> list[threading.Thread]:
    """The threads the threading module started, the main thread among them. Left out: threads
    started elsewhere that called into Python (threading's stand-ins for them), among them
    autograd's device threads, which run a backward with the modes of the thread it came from."""
    return [t for t in threading.enumerate() if not isinstance(t, threading._DummyThread)]


class ThreadHook:
    """The recording mode in each thread started while the Recorder is open; the unreached
    threads that ran meanwhile named in the manifest (module docstring)."""

    def __init__(self, context, make_mode, manifest: dict) -> None:
        self.context = context
        self.make_mode = make_mode  # a RecordingMode for one more thread, on this recording
        self.manifest = manifest
        self.open = False
        self.modes: list = []  # the modes pushed, one per thread reached
        self.reached: set[int] = set()  # idents of the threads reached
        self.existing: dict[int, tuple] = {}  # ident -> (name, native_id, counters, code) at open
        self._previous: Callable[..., object] | None = None  # threading's profile hook before ours
        self._pid = os.getpid()
        self._opener = threading.get_ident()
        self._hook = self._started  # one bound method: threading.getprofile() is compared with it

    def start(self) -> None:
        self.existing = {}
        for t in _python_threads():
            code = thread_code(t)
            if t.ident is not None and t.ident != self._opener and not is_service(code):
                self.existing[t.ident] = (t.name, t.native_id, _scheduled(t.native_id), code)
        # Until close says which of them ran: every thread alive now, as a manifest written
        # before then (a run killed meanwhile) may not claim more.
        self.manifest[MANIFEST_KEY] = [self._entry(ident) for ident in self.existing]
        self._previous = threading.getprofile()
        self.open = True
        threading.setprofile(self._hook)

    def stop(self) -> None:
        """Called once recording is off: no thread is reached from now on, each worker's mode
        passes ops through and leaves its thread's stack, and the record a worker may be
        writing now is finished before this returns."""
        with self.context.lock:  # a worker writing a record holds it
            self.open = False
            modes, self.modes = self.modes, []
        if threading.getprofile() is self._hook:  # else set over ours: ours passes threads on
            threading.setprofile(self._previous)
        for mode in modes:
            _pass_through_from_now(mode)
        try:
            self.manifest[MANIFEST_KEY] = self._unrecorded()
        except Exception as exc:  # noqa: BLE001 - the list of open stays: every thread alive then
            self.context.report_failure("thread", "unrecorded_threads", exc)

    # -- in each thread started while open, before its run() ----------------------------------
    def _started(self, frame, event, arg) -> None:
        previous = self._previous
        sys.setprofile(previous)
        if previous is not None:
            previous(frame, event, arg)  # another hook (another Recorder's) pushes its own first
        if not self.open or os.getpid() != self._pid:  # closed, or in a forked child
            return
        context = self.context
        try:
            with context.lock:
                if not self.open:
                    return
                mode = self.make_mode()
                context.new_thread()
                torch._C._push_on_torch_dispatch_stack(mode)
                self.modes.append(mode)
                self.reached.add(threading.get_ident())
        except Exception as exc:  # noqa: BLE001 - the user's thread runs on, unrecorded
            context.report_failure("thread", threading.current_thread().name, exc, context.seq)

    # -- the threads not reached ----------------------------------------------------------------
    def _entry(self, ident: int, thread: threading.Thread | None = None) -> dict:
        """A thread alive at open (by its ident), or one started past the hook (`thread`)."""
        if thread is None:
            name, native_id, _, code = self.existing[ident]
            return {"name": name, "ident": ident, "native_id": native_id, "code": code, "started": "before"}
        return {"name": thread.name, "ident": ident, "native_id": thread.native_id, "code": thread_code(thread),
                "started": "while open"}

    def _unrecorded(self) -> list[dict]:
        """Entries of the threads not reached that ran while open: alive before it opened, or
        started past the hook; a thread alive now that the kernel never saw run is left out."""
        alive = {t.ident: t for t in _python_threads() if t.ident is not None}
        found = []
        for ident, (_, native_id, before, _) in self.existing.items():
            if ident in self.reached:  # started just before open, its hook run after
                continue
            if ident in alive and before is not None and _scheduled(native_id) == before:
                continue  # never ran while open
            found.append(self._entry(ident))
        for ident, thread in alive.items():
            if ident != self._opener and ident not in self.existing and ident not in self.reached \
                    and not is_service(thread_code(thread)):
                found.append(self._entry(ident, thread))
        return found


# -- a worker's mode once its Recorder closed ---------------------------------------------------
def _pass_through_from_now(mode) -> None:
    mode.__torch_dispatch__ = MethodType(_closed, mode)  # what torch calls from now on
    mode.leave_stack = partial(_leave_stack, mode)


def _closed(mode, func, types, args=(), kwargs=None):
    """The handler of a closed capture's mode: the op as it is, and the mode taken off this
    thread's stack at the next profile event outside it (no profiler of the thread's own)."""
    if sys.getprofile() is None:
        sys.setprofile(mode.leave_stack)
    return func(*args, **(kwargs or {}))


def _leave_stack(mode, frame, event, arg) -> None:
    """Profile function: pop `mode` once it is the top of this thread's stack again (its
    handler has returned), then profile nothing; never raises into the thread's code."""
    try:
        depth = torch._C._len_torch_dispatch_stack()
        stack = [torch._C._get_dispatch_stack_at(i) for i in range(depth)]
        if not any(m is mode for m in stack):
            return  # inside its handler (torch takes it off while the handler runs): not yet
        if stack[-1] is mode:
            f = frame
            while f is not None and f.f_code is not _HANDLER_CODE:
                f = f.f_back
            if f is not None:
                return  # a handler that began before close pushed it again (a decomposition)
            torch._C._pop_torch_dispatch_stack(None)
        sys.setprofile(None)  # gone, or under a mode the user pushed since: its next op calls again
    except Exception:  # noqa: BLE001 - leave the pass-through mode where it is
        sys.setprofile(None)


if dynamo_frames.skip_code is not None:  # TorchDynamo never traces them (as RecordingMode's handler)
    for _code in (_closed.__code__, _leave_stack.__code__):
        dynamo_frames.skip_code(_code)
