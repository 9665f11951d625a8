"""`Recorder`: the capture context manager, its stages, suspension and step schedule.

    with Recorder("trace/", model=net, optimizer=opt) as rec:
        with rec.stage("forward"):
            out = net(x)
        with rec.suspend():
            loss = loss_fn(out, y)
        with rec.stage("backward"):
            loss.backward()
        with rec.stage("optimizer"):
            opt.step()
        rec.step()

Stage options are SpikingJelly 2.0.0 NeuroMC's (`phase`, `reuse_weights`,
`batch_norm_backward`). A phase not given is inferred from the stage name's words
(`infer_phase`: "bwd", "backprop", "sgd_step", ...); a name that does not say its phase
is refused unless `phase=` is given.

`schedule=` (`schedule(...)`, torch.profiler.schedule's arguments) picks the recorded
steps. Between them nothing of the capture is in torch: the dispatch mode and the module
hooks are taken out at the step boundary and put back before the next warm-up or recorded
step, so such a step costs what a plain step costs. `on_trace_ready(path)` is called after
each recorded cycle's data is flushed, and at close for a cycle still open (or, without a
schedule, once at close).

Misuse of this API (nested stages, a stage or step outside the context, a stage name without
a phase, a path holding other data) raises at once. A failure of the capture itself never
reaches the user's code: it is counted in the manifest's `degraded` list and the run goes on
(capture/store/failures.py).

A process forked while the context is open (os.fork, fork-started DataLoader workers) records
nothing and leaves the trace alone; the manifest counts it (`forks`).

The recorder owns the parts (writer, registry, catalog, tracker, op and optimizer logs) and
hands them the state they share as one RecordingContext.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from spiketrace.capture import native
from spiketrace.capture.context import RecordingContext, Stage
from spiketrace.capture.modules.catalog import ModuleCatalog
from spiketrace.capture.modules.module_events import ModuleEventLog
from spiketrace.capture.modules.tracker import ScopeTracker
from spiketrace.capture.ops.dispatch import OpLog, RecordingMode
from spiketrace.capture.ops.optimizers import OptimizerLog
from spiketrace.capture.session import forks
from spiketrace.capture.session.compiled import CompileWatch
from spiketrace.capture.session.fast_paths import enabled_fast_paths
from spiketrace.capture.session.process_facts import device_of, rank_and_world
from spiketrace.capture.session.schedules import NONE, RECORD_AND_SAVE, RECORDED, describe, schedule, step_action
from spiketrace.capture.session.stages import PHASES, RecorderError, StageBook, infer_phase, write_marker
from spiketrace.capture.session.threads import ThreadHook
from spiketrace.capture.store.writer import TraceWriter
from spiketrace.capture.tensors.registry import TensorRegistry
from spiketrace.schemas.statistics_levels import level_of

__all__ = ["PHASES", "Recorder", "RecorderError", "infer_phase", "schedule"]

_BOUND_MODELS: weakref.WeakKeyDictionary[torch.nn.Module, Recorder] = weakref.WeakKeyDictionary()


class Recorder:
    """Records a run into the trace directory `path` while the context is open.

    `schedule`: which steps to record (spiketrace.capture.schedule(...), torch.profiler.schedule(...), or
    any `step -> bool`); None records every step. `on_trace_ready(path)`: called after each
    recorded cycle of the schedule was flushed to the trace, and at a clean close for a cycle
    still open (without a schedule: once, at close). `compact`: merge the small parts of small
    flushes into larger ones at close, so readers pay per few parts.
    `run_id`: the capture run's id; by default agreed by the ranks.
    `value_statistics`: "full" (True), "synaptic" (only where a shipped rule reads them,
    cheaper; NeuroMC and neuron_state then refuse the trace) or "none" (False); see
    schemas/statistics_levels.py. See the module docstring.
    """

    def __init__(
        self,
        path,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | list | None = None,
        *,
        value_statistics: str | bool = "full",
        keep_binary_inputs: bool = False,
        defer_statistics: bool = False,
        flush_events: int = 200_000,
        flush_bytes: int = 256 << 20,
        compact: bool = True,
        schedule: Callable[[int], bool] | None = None,
        on_trace_ready: Callable[[str], None] | None = None,
        metadata: dict | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        run_id: str | None = None,
    ) -> None:
        if flush_events < 1 or flush_bytes < 1:
            raise ValueError("flush_events and flush_bytes must be positive")
        self.path = os.fspath(path)
        self.model = model
        self.optimizers = [] if optimizer is None else list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        self.value_statistics = level_of(value_statistics)  # misuse (an unknown level) raises here
        self.keep_binary_inputs = keep_binary_inputs
        self.defer_statistics = defer_statistics
        self.flush_events = flush_events
        self.flush_bytes = flush_bytes
        self.compact = compact  # merge the small parts of small flushes at close
        self.schedule = schedule
        self._scans_before = None  # the scan sharing to restore at close (native.share_scans)
        self.on_trace_ready = on_trace_ready
        self.metadata = metadata or {}
        default_rank, default_world = rank_and_world()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        self.run_id = run_id  # agreed with the other ranks when the capture opens (the writer does)
        self.active = False
        self.context: RecordingContext | None = None  # built when the context opens
        self._suspended = 0
        self._stages = StageBook()
        self._action = NONE  # the schedule's action for the current step (step_action)
        self._installed = False  # the dispatch mode and module hooks are in torch
        self._unreported = False  # recorded steps since on_trace_ready was last called
        self._underflows: dict[int, dict] = {}  # module_id -> manifest entry (tracker_underflows)

    # The state the API changes lives in the context, where the per-op path reads it.
    @property
    def recording(self) -> bool:
        return self.context is not None and self.context.recording

    @property
    def step_index(self) -> int:
        return 0 if self.context is None else self.context.step_index

    @property
    def current_stage(self) -> Stage | None:
        return None if self.context is None else self.context.current_stage

    @property
    def lock(self) -> threading.RLock | None:
        return None if self.context is None else self.context.lock

    # -- context ------------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        if self.active:
            raise RecorderError("this Recorder is already open; a Recorder records one trace")
        if self.model is not None:
            other = _BOUND_MODELS.get(self.model)
            if other is not None and other.active:
                raise RecorderError(
                    f"model {type(self.model).__name__} is already bound to the recorder writing {other.path}"
                )
        fast_paths = enabled_fast_paths()
        settings = {
            "value_statistics": self.value_statistics,
            "keep_binary_inputs": self.keep_binary_inputs,
            "defer_statistics": self.defer_statistics,
            "flush_events": self.flush_events,
            "flush_bytes": self.flush_bytes,
            "compact": self.compact,
            "schedule": describe(self.schedule),
            # What ran the per-op work: the fast paths on and whether the compiled loops were
            # built; the trace is the same either way.
            "fast_paths": sorted(fast_paths),
            "native": native.AVAILABLE,
            "scan_threads": native.scan_threads() if "shared_scans" in fast_paths else 1,
        }
        from spiketrace.capture import __version__

        self.writer = TraceWriter(
            self.path,
            run_id=self.run_id,
            rank=self.rank,
            world_size=self.world_size,
            settings=settings,
            metadata=json.loads(json.dumps(self.metadata, default=str)),
            versions={
                "spiketrace": __version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            device=device_of(self.model),
            flush_rows=self.flush_events,
            flush_bytes=self.flush_bytes,
            compact=self.compact,
        )
        tables = self.writer.tables
        self.writer.manifest["tracker_underflows"] = []
        self.writer.manifest["forked_children"] = 0  # processes forked while open (forks.watch)
        self._underflows = {}
        self.compiled = CompileWatch(
            self.writer.manifest, self.path, lambda site, what, exc: self.writer.failures.report(site, what, exc)
        )
        if self.model is not None:
            self.compiled.model(self.model)
        self.catalog = ModuleCatalog(tables["modules"], lambda what, exc: self.writer.failures.report("catalog", what, exc))
        parameter_names = self.catalog.bind_model(self.model) if self.model is not None else {}
        # _context is the same object, typed as built: every method below the properties runs after this
        context = self.context = self._context = RecordingContext(
            self.writer, self.catalog, keep_binary_inputs=self.keep_binary_inputs,
            defer_statistics=self.defer_statistics, value_statistics=self.value_statistics,
            fast_paths=fast_paths,
        )
        self.registry = context.registry = TensorRegistry(
            tables["tensors"], tables["tensor_frees"], context.peek_seq, parameter_names, self.value_statistics,
            self.defer_statistics,
            report_failure=lambda exc, seq: context.report_failure("statistics", context.current_record, exc, seq),
            native_scan="native_statistics" in fast_paths,
        )
        self._scans_before = native.share_scans("shared_scans" in fast_paths)
        self.ops = OpLog(context)
        self.module_events = ModuleEventLog(context)
        self.module_events.native = self.ops.native  # a hook's row in compiled code too, where ops have it
        context.native_describe = self.ops.native.describe if self.ops.native is not None else None
        self.optimizer_log = OptimizerLog(context, tables["optimizer_steps"], parameter_names)
        self.writer.before_flush += [self.registry.resolve_pending, self.ops.resolve_pending, self.catalog.write_rows,
                                     self._write_steps]
        self.writer.on_failure.append(self._update_recording)  # a trace that cannot be written records nothing
        if self.model is not None:
            _BOUND_MODELS[self.model] = self
        self.tracker = context.tracker = ScopeTracker(
            self._on_module_event, self._on_tracker_underflow,
            lambda site, what, exc: context.report_failure(site, what, exc, context.seq),
        )
        self.writer.manifest["torch_limitations"] = self.tracker.torch_limitations  # what this torch cannot tell
        self.mode = RecordingMode(context, self.ops)
        # Threads started from now on record with a mode of their own.
        self.threads = ThreadHook(context, lambda: RecordingMode(context, self.ops), self.writer.manifest)
        for optimizer in self.optimizers:
            self.optimizer_log.bind(optimizer)
        forks.watch(self)  # a process forked from now on records nothing, writes nothing
        self.active = True
        self.threads.start()
        self._action = step_action(self.schedule, 0)
        self._apply_action()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.active = False
        forks.forget(self)
        self._context.recording = False
        try:
            if self._installed:
                self.compiled.frames()
                self.mode.__exit__(None, None, None)
        finally:
            self._installed = False
            self.threads.stop()  # other threads' modes pass ops through; a record being written is done
            self.tracker.__exit__()  # its hooks out of torch, every grad hook released
            self.optimizer_log.unbind()
            if self.model is not None and _BOUND_MODELS.get(self.model) is self:
                del _BOUND_MODELS[self.model]
            if exc_type is not None:
                self.writer.manifest["error"] = f"{exc_type.__name__}: {exc}"
            with self._context.lock:  # a worker that saw `recording` on before it went off records after, not during
                self.writer.close("complete" if exc_type is None else "failed")  # never raises
            native.restore_scans(self._scans_before)
            self._scans_before = None
        if exc_type is None and self._unreported and self.on_trace_ready is not None:
            self._unreported = False
            self.on_trace_ready(self.path)  # the user's callback: its errors are the user's

    def _write_steps(self, writer) -> None:
        writer.manifest["steps_recorded"] = len(self._context.steps_recorded)

    # -- recording state ----------------------------------------------------------------------
    def _update_recording(self) -> None:
        self._context.recording = (
            self.active and not self._suspended and self._action in RECORDED and not self.writer.failed
        )

    def _inherited_by_fork(self) -> None:
        """This process is a fork of the one that opened the recorder (`forks`): from
        now on it records nothing, and the writer, a copy of the parent's, writes nothing."""
        self._action = NONE  # the step running now is not recorded: its end flushes nothing
        self.schedule = forks.never  # nor is any later one: the mode leaves torch at the next step
        self._unreported = False  # no trace of this process to report to on_trace_ready
        self._context.lock = threading.RLock()  # a lock another thread held at the fork stays held here
        self.tracker.pause()  # the module hooks out of torch
        self._update_recording()

    def _apply_action(self) -> None:
        """Put the capture into torch for a warm-up or recorded step, take it out otherwise."""
        if self._action != NONE and not self._installed:
            self.tracker.resume()
            self.mode.__enter__()
            self._installed = True
            self.compiled.frames_from_now()
        elif self._action == NONE and self._installed and _get_current_dispatch_mode() is self.mode:
            # (A mode the user entered after opening the recorder sits above ours: then ours
            # stays in, and only records nothing.)
            self.compiled.frames()
            self.mode.__exit__(None, None, None)
            self.tracker.pause()
            self._installed = False
        if self._action in RECORDED:
            self._unreported = True
        self._update_recording()

    def step(self) -> None:
        """End the current step: the schedule decides what the next one does (record it, warm
        up, or leave torch alone); a recorded cycle that ends is flushed and reported to
        `on_trace_ready`."""
        if not self.active:
            raise RecorderError("step() called outside the Recorder context")
        if self.current_stage is not None:
            raise RecorderError(f"step() called inside stage {self.current_stage.name!r}")
        self.tracker.end_step()
        ended = self._action
        self._context.step_index += 1
        self._action = step_action(self.schedule, self._context.step_index)
        if ended in RECORDED and (ended == RECORD_AND_SAVE or self._action not in RECORDED):
            self._context.recording = False
            with self._context.lock:  # a worker thread's record (ThreadHook) waits for the flush
                self.writer.flush()  # never raises
            if self.on_trace_ready is not None:
                self._unreported = False
                self.on_trace_ready(self.path)  # the user's callback: its errors are the user's
        self._apply_action()

    @contextmanager
    def suspend(self) -> Iterator[Recorder]:
        """Nothing is recorded inside (module scopes are still tracked, as SpikingJelly does)."""
        if not self.active:
            raise RecorderError("suspend() used outside the Recorder context")
        self._suspended += 1
        self._update_recording()
        try:
            yield self
        finally:
            self._suspended -= 1
            self._update_recording()

    @contextmanager
    def stage(
        self,
        name: str,
        phase: str | None = None,
        reuse_weights: bool | None = None,
        batch_norm_backward: bool | None = None,
    ) -> Iterator[Recorder]:
        if not self.active:
            raise RecorderError(f"stage({name!r}) used outside the Recorder context")
        if self.current_stage is not None:
            raise RecorderError(f"stage({name!r}) opened inside stage {self.current_stage.name!r}; stages do not nest")
        stage = self._stages.open(name, phase, reuse_weights, batch_norm_backward)
        marked = self._action in RECORDED and not self.writer.failed  # markers for recorded steps only
        if marked:
            write_marker(self._context, "begin", stage)
        self._context.current_stage = stage
        try:
            yield self
        finally:
            self._context.current_stage = None
            if marked:
                write_marker(self._context, "end", stage)

    # -- module hooks and the tracker ----------------------------------------------------------------
    def _on_module_event(self, kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                         call_index: int) -> None:
        context = self._context
        with context.lock:
            seq = context.seq  # the seq this record takes, if it gets as far
            try:
                if kind == "forward_pre":
                    self.compiled.module(module, tracker_name)
                self.module_events.write(kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                                         call_index)
            except Exception as exc:  # noqa: BLE001 - a capture failure (capture/store/failures.py)
                site = "module_hook" if kind.startswith("forward") else "grad_hook"
                context.report_failure(site, tracker_name, exc, seq)

    def _on_tracker_underflow(self, module, tracker_name: str) -> None:
        """Where SpikingJelly's tracker would raise and abort the run (ScopeTracker):
        the manifest's `tracker_underflows`, one entry per module."""
        context = self._context
        try:
            module_id = context.catalog.module_id(module, tracker_name=tracker_name)
            entry = self._underflows.get(module_id)
            if entry is None:
                # first_seq: every record with a smaller seq happened before it
                entry = {"module_id": module_id, "tracker_name": tracker_name, "count": 0, "first_seq": context.seq}
                self._underflows[module_id] = entry
                self.writer.manifest["tracker_underflows"].append(entry)
            entry["count"] += 1
        except Exception as exc:  # noqa: BLE001 - a capture failure (capture/store/failures.py)
            context.report_failure("tracker", tracker_name, exc, context.seq)
