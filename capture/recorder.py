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

Stage options are SpikingJelly 2.0.0 NeuroMC's (`phase`, `reuse_weights`,
`batch_norm_backward`). A phase not given is inferred from the name as the seed profiler did
("backward" in the name, "optimizer"/"update", else forward), and its legacy tokens `b<N>`,
`t<N>` and `without_bp_bn` are honoured.

Misuse of this API (nested stages, a stage or step outside the context, a path holding other
data) raises at once. A failure of the capture itself never reaches the user's code: it is
counted in the manifest's `degraded` list and the run goes on (capture/failures.py).

The recorder owns the parts (writer, registry, catalog, tracker, op and optimizer logs) and
hands them the state they share as one RecordingContext (capture/context.py).
"""

from __future__ import annotations

import json
import os
import platform
import re
import threading
import weakref
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from capture.context import RecordingContext, Stage
from capture.dispatch import OpLog, RecordingMode
from capture.modules import ModuleCatalog
from capture.optimizers import OptimizerLog
from capture.tensors import TensorRegistry, excluded_from_modes
from capture.tracker import ScopeTracker
from capture.writer import TraceWriter

_BOUND_MODELS: "weakref.WeakKeyDictionary[torch.nn.Module, Recorder]" = weakref.WeakKeyDictionary()
_LEGACY_B = re.compile(r"(?:^|[^a-z0-9])b(\d+)(?:[^a-z0-9]|$)")
_LEGACY_T = re.compile(r"(?:^|[^a-z0-9])t(\d+)(?:[^a-z0-9]|$)")
PHASES = ("forward", "backward", "optimizer")


class RecorderError(RuntimeError):
    """The recorder was used in a way it cannot honour."""


def schedule(*, skip_first: int = 0, wait: int = 0, active: int = 1, repeat: int = 0) -> Callable[[int], bool]:
    """Which steps to record, like torch.profiler.schedule: skip `skip_first` steps, then
    cycles of `wait` unrecorded and `active` recorded steps, `repeat` cycles (0 = forever)."""
    if min(skip_first, wait, repeat) < 0 or active < 1:
        raise ValueError("schedule: skip_first, wait and repeat must be >= 0 and active >= 1")

    def records(step: int) -> bool:
        if step < skip_first:
            return False
        cycle, position = divmod(step - skip_first, wait + active)
        return (repeat == 0 or cycle < repeat) and position >= wait

    records.description = {"skip_first": skip_first, "wait": wait, "active": active, "repeat": repeat}
    return records


def infer_phase(name: str) -> str:
    lowered = name.lower()
    if "backward" in lowered:
        return "backward"
    if "optimizer" in lowered or "update" in lowered:
        return "optimizer"
    return "forward"


def _legacy_index(pattern: re.Pattern, name: str) -> int | None:
    match = pattern.search(name.lower())
    return int(match.group(1)) if match else None


def _rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def _device_of(model: torch.nn.Module | None) -> str:
    parameter = next(model.parameters(), None) if model is not None else None
    if parameter is None or parameter.device.type == "cpu":
        return "cpu"
    if parameter.device.type == "cuda":
        return f"{parameter.device} ({torch.cuda.get_device_name(parameter.device)})"
    return str(parameter.device)


class Recorder:
    """Records a run into the trace directory `path` while the context is open."""

    def __init__(
        self,
        path,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | list | None = None,
        *,
        value_statistics: bool = True,
        keep_binary_inputs: bool = False,
        defer_statistics: bool = False,
        flush_events: int = 200_000,
        flush_bytes: int = 256 << 20,
        schedule: Callable[[int], bool] | None = None,
        metadata: dict | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if flush_events < 1 or flush_bytes < 1:
            raise ValueError("flush_events and flush_bytes must be positive")
        self.path = os.fspath(path)
        self.model = model
        self.optimizers = [] if optimizer is None else list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
        self.value_statistics = value_statistics
        self.keep_binary_inputs = keep_binary_inputs
        self.defer_statistics = defer_statistics
        self.flush_events = flush_events
        self.flush_bytes = flush_bytes
        self.schedule = schedule
        self.metadata = metadata or {}
        default_rank, default_world = _rank_and_world()
        self.rank = default_rank if rank is None else rank
        self.world_size = default_world if world_size is None else world_size
        self.active = False
        self.context: RecordingContext | None = None  # built when the context opens
        self._suspended = 0
        self._stage_options: dict[str, tuple] = {}
        self._next_stage_id = 0
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
    def __enter__(self) -> "Recorder":
        if self.active:
            raise RecorderError("this Recorder is already open; a Recorder records one trace")
        if self.model is not None:
            other = _BOUND_MODELS.get(self.model)
            if other is not None and other.active:
                raise RecorderError(
                    f"model {type(self.model).__name__} is already bound to the recorder writing {other.path}"
                )
        settings = {
            "value_statistics": self.value_statistics,
            "keep_binary_inputs": self.keep_binary_inputs,
            "defer_statistics": self.defer_statistics,
            "flush_events": self.flush_events,
            "flush_bytes": self.flush_bytes,
            "schedule": getattr(self.schedule, "description", None if self.schedule is None else repr(self.schedule)),
        }
        import capture

        self.writer = TraceWriter(
            self.path,
            rank=self.rank,
            world_size=self.world_size,
            settings=settings,
            metadata=json.loads(json.dumps(self.metadata, default=str)),
            versions={
                "spiketrace": capture.__version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            device=_device_of(self.model),
            flush_rows=self.flush_events,
            flush_bytes=self.flush_bytes,
        )
        tables = self.writer.tables
        self.writer.manifest["tracker_underflows"] = []
        self._underflows = {}
        self.catalog = ModuleCatalog(tables["modules"])
        parameter_names = self.catalog.bind_model(self.model) if self.model is not None else {}
        context = self.context = RecordingContext(
            self.writer, self.catalog, keep_binary_inputs=self.keep_binary_inputs,
            defer_statistics=self.defer_statistics,
        )
        self.registry = context.registry = TensorRegistry(
            tables["tensors"], tables["tensor_frees"], context.peek_seq, parameter_names, self.value_statistics,
            self.defer_statistics,
            report_failure=lambda exc, seq: context.report_failure("statistics", context.current_record, exc, seq),
        )
        self.ops = OpLog(context)
        self.optimizer_log = OptimizerLog(context, tables["optimizer_steps"], parameter_names)
        self.writer.before_flush += [self.registry.resolve_pending, self.ops.resolve_pending, self.catalog.write_rows, self._write_steps]
        self.writer.on_failure.append(self._update_recording)  # a trace that cannot be written records nothing
        if self.model is not None:
            _BOUND_MODELS[self.model] = self
        self.tracker = context.tracker = ScopeTracker(
            self._on_module_event, self._on_tracker_underflow,
            lambda site, what, exc: context.report_failure(site, what, exc, context.seq),
        )
        self.mode = RecordingMode(context, self.ops)
        for optimizer in self.optimizers:
            self.optimizer_log.bind(optimizer)
        self.tracker.__enter__()
        self.mode.__enter__()
        self.active = True
        self._update_recording()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.active = False
        self.context.recording = False
        try:
            self.mode.__exit__(None, None, None)
        finally:
            self.tracker.__exit__()
            self.optimizer_log.unbind()
            if self.model is not None and _BOUND_MODELS.get(self.model) is self:
                del _BOUND_MODELS[self.model]
            if exc_type is not None:
                self.writer.manifest["error"] = f"{exc_type.__name__}: {exc}"
            self.writer.close("complete" if exc_type is None else "failed")  # never raises

    def _write_steps(self, writer) -> None:
        writer.manifest["steps_recorded"] = len(self.context.steps_recorded)

    # -- recording state ----------------------------------------------------------------------
    def _update_recording(self) -> None:
        in_schedule = self.schedule is None or self.schedule(self.step_index)
        self.context.recording = self.active and not self._suspended and in_schedule and not self.writer.failed

    def step(self) -> None:
        """Advance the step index; the schedule decides whether the new step is recorded."""
        if not self.active:
            raise RecorderError("step() called outside the Recorder context")
        if self.current_stage is not None:
            raise RecorderError(f"step() called inside stage {self.current_stage.name!r}")
        self.context.step_index += 1
        self._update_recording()

    @contextmanager
    def suspend(self) -> Iterator["Recorder"]:
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
    ) -> Iterator["Recorder"]:
        if not self.active:
            raise RecorderError(f"stage({name!r}) used outside the Recorder context")
        if self.current_stage is not None:
            raise RecorderError(f"stage({name!r}) opened inside stage {self.current_stage.name!r}; stages do not nest")
        stage = self._make_stage(name, phase, reuse_weights, batch_norm_backward)
        self._stage_marker("begin", stage)
        self.context.current_stage = stage
        try:
            yield self
        finally:
            self.context.current_stage = None
            self._stage_marker("end", stage)

    def _make_stage(self, name, phase, reuse_weights, batch_norm_backward) -> Stage:
        if phase is not None and phase not in PHASES:
            raise ValueError(f"stage({name!r}): phase must be one of {PHASES}, got {phase!r}")
        b_index, t_index = _legacy_index(_LEGACY_B, name), _legacy_index(_LEGACY_T, name)
        options = (
            phase or infer_phase(name),
            bool((b_index or 0) > 0 or (t_index or 0) > 0) if reuse_weights is None else bool(reuse_weights),
            ("without_bp_bn" not in name.lower()) if batch_norm_backward is None else bool(batch_norm_backward),
        )
        if self._stage_options.setdefault(name, options) != options:
            raise ValueError(f"stage {name!r} was reused with different options: {self._stage_options[name]} then {options}")
        stage = Stage(self._next_stage_id, name, options[0], "explicit" if phase else "inferred", options[1], options[2], b_index, t_index)
        self._next_stage_id += 1
        return stage

    def _stage_marker(self, kind: str, stage: Stage) -> None:
        context = self.context
        with context.lock:
            try:
                context.writer.tables["stage_markers"].append(
                    seq=context.take_seq(),
                    kind=kind,
                    stage_id=stage.stage_id,
                    name=stage.name,
                    phase=stage.phase,
                    phase_source=stage.phase_source,
                    reuse_weights=stage.reuse_weights,
                    batch_norm_backward=stage.batch_norm_backward,
                    b_index=stage.b_index,
                    t_index=stage.t_index,
                    step=context.step_index,
                )
            except Exception as exc:  # noqa: BLE001 - a capture failure (capture/failures.py)
                context.report_failure("stage", stage.name, exc, context.seq - 1)

    # -- module hooks and the tracker ----------------------------------------------------------------
    def _on_module_event(self, kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                         call_index: int) -> None:
        context = self.context
        with context.lock:
            seq = context.seq  # the seq this record takes, if it gets as far
            try:
                self._write_module_event(kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                                         call_index)
            except Exception as exc:  # noqa: BLE001 - a capture failure (capture/failures.py)
                site = "module_hook" if kind.startswith("forward") else "grad_hook"
                context.report_failure(site, tracker_name, exc, seq)

    def _write_module_event(self, kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                            call_index: int) -> None:
        context = self.context
        module_id = context.catalog.module_id(module, tracker_name=tracker_name)
        if not context.recording:
            return
        with excluded_from_modes():
            seq = context.take_seq()
            context.current_record = tracker_name
            registry = context.registry
            ids = [None if t is None else registry.describe(t, seq) for t in tensors]
            kwarg_ids = [registry.describe(t, seq) for t in kwarg_tensors]
            stage = context.current_stage
            context.writer.tables["module_events"].append(
                seq=seq,
                kind=kind,
                module_id=module_id,
                tracker_name=tracker_name,
                call_index=call_index,
                step=context.step_index,
                stage_id=stage.stage_id if stage else None,
                stage=stage.name if stage else "unlabeled",
                phase=stage.phase if stage else None,
                grad_enabled=torch.is_grad_enabled(),
                training=module.training,
                thread=context.thread_index(),
                inputs=ids if kind in ("forward_pre", "backward_post") else None,
                outputs=ids if kind in ("forward_post", "backward_pre") else None,
                kwarg_inputs=kwarg_ids if kind == "forward_post" else None,
                inputs_require_grad=inputs_require_grad,
            )
            if kind == "forward_post" and module_id in context.catalog.stateful:
                context.snapshot(seq, module_id, module, force=True)

    def _on_tracker_underflow(self, module, tracker_name: str) -> None:
        """Where SpikingJelly's tracker would raise and abort the run (capture/tracker.py):
        the manifest's `tracker_underflows`, one entry per module."""
        context = self.context
        try:
            module_id = context.catalog.module_id(module, tracker_name=tracker_name)
            entry = self._underflows.get(module_id)
            if entry is None:
                # first_seq: every record with a smaller seq happened before it
                entry = {"module_id": module_id, "tracker_name": tracker_name, "count": 0, "first_seq": context.seq}
                self._underflows[module_id] = entry
                self.writer.manifest["tracker_underflows"].append(entry)
            entry["count"] += 1
        except Exception as exc:  # noqa: BLE001 - a capture failure (capture/failures.py)
            context.report_failure("tracker", tracker_name, exc, context.seq)
