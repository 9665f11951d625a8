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
"""

from __future__ import annotations

import json
import os
import platform
import re
import threading
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

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


@dataclass(frozen=True)
class Stage:
    stage_id: int
    name: str
    phase: str
    phase_source: str
    reuse_weights: bool
    batch_norm_backward: bool
    b_index: int | None
    t_index: int | None


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
        self.lock = threading.RLock()
        self.active = False
        self.recording = False
        self.step_index = 0
        self.current_stage: Stage | None = None
        self._suspended = 0
        self._stage_options: dict[str, tuple] = {}
        self._next_stage_id = 0
        self._seq = 0
        self._threads: dict[int, int] = {}
        self._scopes: dict[tuple, int] = {}
        self._scope_generation = -1
        self._scope_id = 0
        self._memory_snapshots: dict[int, tuple] = {}
        self._steps_recorded: set[int] = set()
        self._stateful_generation = -1
        self._active_stateful: list = []  # (module_id, module) of active neurons, per tracker generation

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
        self.catalog = ModuleCatalog(tables["modules"])
        parameter_names = self.catalog.bind_model(self.model) if self.model is not None else {}
        self.registry = TensorRegistry(
            tables["tensors"], tables["tensor_frees"], self.peek_seq, parameter_names, self.value_statistics,
            self.defer_statistics,
        )
        self.ops = OpLog(self)
        self.optimizer_log = OptimizerLog(self, tables["optimizer_steps"], parameter_names)
        self.writer.before_flush += [self.registry.resolve_pending, self.ops.resolve_pending, self.catalog.write_rows, self._write_steps]
        if self.model is not None:
            _BOUND_MODELS[self.model] = self
        self._main_thread = threading.get_ident()
        self.tracker = ScopeTracker(self._on_module_event)
        self.mode = RecordingMode(self)
        for optimizer in self.optimizers:
            self.optimizer_log.bind(optimizer)
        self.tracker.__enter__()
        self.mode.__enter__()
        self.active = True
        self._update_recording()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.recording = False
        self.active = False
        try:
            self.mode.__exit__(None, None, None)
        finally:
            self.tracker.__exit__()
            self.optimizer_log.unbind()
            if self.model is not None and _BOUND_MODELS.get(self.model) is self:
                del _BOUND_MODELS[self.model]
            if exc_type is not None:
                self.writer.manifest["error"] = f"{exc_type.__name__}: {exc}"
            self.writer.close("complete" if exc_type is None else "failed")

    def _write_steps(self, writer) -> None:
        writer.manifest["steps_recorded"] = len(self._steps_recorded)

    # -- ordering, threads, scopes ------------------------------------------------------------------
    def take_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        self._steps_recorded.add(self.step_index)
        return seq

    def peek_seq(self) -> int:
        return self._seq

    def thread_index(self) -> int:
        ident = threading.get_ident()
        index = self._threads.get(ident)
        if index is None:
            index = self._threads[ident] = 0 if ident == self._main_thread else len(self._threads) + 1
        return index

    def scope_id(self) -> int:
        tracker = self.tracker
        if tracker.generation == self._scope_generation:
            return self._scope_id
        catalog = self.catalog
        key = (
            tuple(sorted(tracker.parents)),
            tuple(sorted(catalog.module_id(m) for m in tracker.active_modules)),
        )
        scope_id = self._scopes.get(key)
        if scope_id is None:
            scope_id = self._scopes[key] = len(self._scopes)
            self.writer.tables["scopes"].append(scope_id=scope_id, parents=key[0], active_modules=key[1])
        self._scope_generation, self._scope_id = tracker.generation, scope_id
        return scope_id

    # -- recording state ----------------------------------------------------------------------
    def _update_recording(self) -> None:
        in_schedule = self.schedule is None or self.schedule(self.step_index)
        self.recording = self.active and not self._suspended and in_schedule

    def step(self) -> None:
        """Advance the step index; the schedule decides whether the new step is recorded."""
        if not self.active:
            raise RecorderError("step() called outside the Recorder context")
        if self.current_stage is not None:
            raise RecorderError(f"step() called inside stage {self.current_stage.name!r}")
        self.step_index += 1
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
        self.current_stage = stage
        try:
            yield self
        finally:
            self.current_stage = None
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
        with self.lock:
            self.writer.tables["stage_markers"].append(
                seq=self.take_seq(),
                kind=kind,
                stage_id=stage.stage_id,
                name=stage.name,
                phase=stage.phase,
                phase_source=stage.phase_source,
                reuse_weights=stage.reuse_weights,
                batch_norm_backward=stage.batch_norm_backward,
                b_index=stage.b_index,
                t_index=stage.t_index,
                step=self.step_index,
            )

    # -- module hooks and neuron memories ---------------------------------------------------------
    def _on_module_event(self, kind, module, tracker_name, tensors, kwarg_tensors, inputs_require_grad,
                         call_index: int) -> None:
        module_id = self.catalog.module_id(module, tracker_name=tracker_name)
        if not self.recording:
            return
        with self.lock, excluded_from_modes():
            seq = self.take_seq()
            registry = self.registry
            ids = [None if t is None else registry.describe(t, seq) for t in tensors]
            kwarg_ids = [registry.describe(t, seq) for t in kwarg_tensors]
            stage = self.current_stage
            self.writer.tables["module_events"].append(
                seq=seq,
                kind=kind,
                module_id=module_id,
                tracker_name=tracker_name,
                call_index=call_index,
                step=self.step_index,
                stage_id=stage.stage_id if stage else None,
                stage=stage.name if stage else "unlabeled",
                phase=stage.phase if stage else None,
                grad_enabled=torch.is_grad_enabled(),
                training=module.training,
                thread=self.thread_index(),
                inputs=ids if kind in ("forward_pre", "backward_post") else None,
                outputs=ids if kind in ("forward_post", "backward_pre") else None,
                kwarg_inputs=kwarg_ids if kind == "forward_post" else None,
                inputs_require_grad=inputs_require_grad,
            )
            if kind == "forward_post" and module_id in self.catalog.stateful:
                self._snapshot(seq, module_id, module, force=True)

    def snapshot_memories(self, seq: int) -> None:
        """Record the memories of active stateful neurons whenever they changed (NeuronState replay)."""
        tracker = self.tracker
        if tracker.generation != self._stateful_generation:
            ids, stateful = self.catalog.ids, self.catalog.stateful
            self._active_stateful = [
                (ids[id(m)], m) for m in tracker.active_modules if ids.get(id(m)) in stateful
            ]
            self._stateful_generation = tracker.generation
        for module_id, module in self._active_stateful:
            self._snapshot(seq, module_id, module, force=False)

    def _snapshot(self, seq: int, module_id: int, module, force: bool) -> None:
        memories = module._memories
        values = tuple(memories.values())
        previous = self._memory_snapshots.get(module_id)
        if not force and previous is not None and len(previous) == len(values) and all(
            a is b for a, b in zip(previous, values)
        ):
            return
        self._memory_snapshots[module_id] = values
        rows = self.writer.tables["neuron_memories"]
        for name, value in memories.items():
            if isinstance(value, torch.Tensor):
                kind, tensor_id, number = "tensor", self.registry.describe(value, seq), None
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                kind, tensor_id, number = "float", None, float(value)
            else:
                kind, tensor_id, number = ("none" if value is None else "other"), None, None
            rows.append(seq=seq, module_id=module_id, name=name, kind=kind, tensor_id=tensor_id, value=number)
