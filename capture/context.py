"""`RecordingContext`: the state the recorder shares with the parts that write records.

The op log, the optimizer log and the module-hook code need the same
few things: whether recording is on, the current stage and step, the shared `seq` counter,
thread and scope ids, neuron memory snapshots, the tensor registry, the writer, the lock and
the failure log. The Recorder builds one context when it opens and sets its fields (stage,
step, recording) as the user calls its API; the logs only read them. They hold this object,
never the Recorder, so nothing below the Recorder imports it.

A slotted dataclass of plain attributes: the per-op path reads `recording`, `step_index`
and `current_stage` as single attribute loads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from operator import is_
from typing import TYPE_CHECKING

import torch

from spiketrace.capture.native.counters import Counter, new_counter

if TYPE_CHECKING:
    from collections.abc import Callable

    from spiketrace.capture.modules.catalog import ModuleCatalog
    from spiketrace.capture.modules.tracker import ScopeTracker
    from spiketrace.capture.store.writer import TraceWriter
    from spiketrace.capture.tensors.registry import TensorRegistry

# Distinct (parents, active modules) states whose scope id is remembered before starting over.
SCOPES_REMEMBERED = 65536


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


@dataclass(eq=False, slots=True)
class RecordingContext:
    writer: TraceWriter
    catalog: ModuleCatalog
    keep_binary_inputs: bool = False
    defer_statistics: bool = False
    value_statistics: str = "full"  # the level (schemas/statistics_levels.py)
    fast_paths: frozenset = frozenset()  # capture/session/fast_paths.py
    # Set right after the context is built (Recorder.__enter__), since they take its seq counter
    # and scope state; unset until then:
    registry: TensorRegistry = field(init=False, repr=False)
    tracker: ScopeTracker = field(init=False, repr=False)
    # Set by the Recorder's API:
    recording: bool = False
    step_index: int = 0
    current_stage: Stage | None = None
    # What the record being written is about (an op or a module), for failure reports.
    current_record: str = ""
    lock: threading.RLock = field(default_factory=threading.RLock)
    # The next record's seq (`seq` reads and sets it), a counter the compiled record advances in C.
    seq_counter: Counter = field(default_factory=new_counter)
    steps_recorded: set = field(default_factory=set)
    main_thread: int = field(default_factory=threading.get_ident)
    _threads: dict = field(default_factory=dict)  # ident -> thread index (the events' `thread`)
    _thread_count: int = 0  # indices given to threads other than main_thread
    _scopes: dict = field(default_factory=dict)
    _scope_generation: int = -1
    _scope_id: int = 0
    _scope_memo: dict = field(default_factory=dict)  # (parents, ids of active modules) -> scope id
    _memory_snapshots: dict = field(default_factory=dict)
    # The compiled record's describe(tensor, seq) (capture/native/record/hooks.c), or None: a memory
    # tensor it takes costs a fraction of the Python describe.
    native_describe: Callable[[torch.Tensor, int], int] | None = None
    _stateful_generation: int = -1
    _active_stateful: list = field(default_factory=list)  # (module_id, module) of active neurons

    # -- ordering, threads, scopes ------------------------------------------------------------------
    @property
    def seq(self) -> int:
        return self.seq_counter.value

    @seq.setter
    def seq(self, value: int) -> None:
        self.seq_counter.value = value

    def take_seq(self) -> int:
        seq = self.seq_counter.take()
        self.steps_recorded.add(self.step_index)
        return seq

    def peek_seq(self) -> int:
        return self.seq_counter.value

    def thread_index(self) -> int:
        ident = threading.get_ident()
        index = self._threads.get(ident)
        if index is None:
            if ident == self.main_thread:
                index = 0
            else:
                self._thread_count += 1
                index = self._thread_count
            self._threads[ident] = index
        return index

    def new_thread(self) -> None:
        """The calling thread has just started (ThreadHook): its records get an index
        of their own, even where it reuses the ident of a thread that ended. Under the lock."""
        self._threads.pop(threading.get_ident(), None)

    def scope_id(self) -> int:
        """The interned (parents, active_modules) state of the tracker, written once per state."""
        tracker = self.tracker
        if tracker.generation == self._scope_generation:
            return self._scope_id
        # A scope recurs at every step (each module enter and exit changes it): found again by
        # its two sets as they are, not rebuilt (sorted names, each module's catalog id: too
        # slow for every change). A module's id() is its own while the catalog, which holds every module it
        # numbered, lives; the memo is keyed by modules the catalog numbered below.
        memo_key = (frozenset(tracker.parents), frozenset(map(id, tracker.active_modules)))
        scope_id = self._scope_memo.get(memo_key)
        if scope_id is None:
            catalog = self.catalog
            key = (
                tuple(sorted(tracker.parents)),
                tuple(sorted(catalog.module_id(m) for m in tracker.active_modules)),
            )
            scope_id = self._scopes.get(key)
            if scope_id is None:
                scope_id = len(self._scopes)
                self.writer.tables["scopes"].append(scope_id=scope_id, parents=key[0], active_modules=key[1])
                self._scopes[key] = scope_id  # only once its row is written
            if len(self._scope_memo) > SCOPES_REMEMBERED:
                self._scope_memo.clear()
            self._scope_memo[memo_key] = scope_id
        self._scope_generation, self._scope_id = tracker.generation, scope_id
        return scope_id

    # -- failures ---------------------------------------------------------------------------------
    def report_failure(self, site: str, what: str, exc: BaseException, seq: int | None = None) -> None:
        """Count a capture failure (capture/store/failures.py) and drop the row it cut short."""
        with self.lock:
            self.writer.failures.report(site, what, exc, seq)
            try:
                self.writer.drop_partial_rows()
            except Exception:  # noqa: BLE001 - nothing more can be done for the buffers
                pass

    # -- neuron memories --------------------------------------------------------------------------
    def snapshot_memories(self, seq: int) -> None:
        """Record the memories of active stateful neurons whenever they changed (NeuronState replay)."""
        tracker = self.tracker
        if tracker.generation != self._stateful_generation:
            ids, stateful = self.catalog.ids, self.catalog.stateful
            self._active_stateful = [
                (ids[id(m)], m) for m in tracker.active_modules if ids.get(id(m)) in stateful
            ]
            self._stateful_generation = tracker.generation
        snapshots = self._memory_snapshots
        for module_id, module in self._active_stateful:
            # Runs once per op while a neuron is active, and its memories are mostly the very
            # objects last recorded (map(is_) compares identities without a generator frame).
            previous, memories = snapshots.get(module_id), module._memories
            if previous is None or len(previous) != len(memories) or not all(map(is_, previous, memories.values())):
                self.snapshot(seq, module_id, module)

    def snapshot(self, seq: int, module_id: int, module) -> None:
        """Write the neuron's memories now (as they are after a forward, or changed since)."""
        memories = module._memories
        values = tuple(memories.values())
        native_describe = self.native_describe
        rows = []
        for name, value in memories.items():
            if isinstance(value, torch.Tensor):
                tensor_id = native_describe(value, seq) if native_describe is not None else -1
                kind, number = "tensor", None
                if tensor_id < 0:  # not one the compiled record describes: the Python path
                    tensor_id = self.registry.describe(value, seq)
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                kind, tensor_id, number = "float", None, float(value)
            else:
                kind, tensor_id, number = ("none" if value is None else "other"), None, None
            rows.append((name, kind, tensor_id, number))
        # Appended and remembered only once every memory was described: a failure leaves the
        # snapshot unwritten and so retried at the next record.
        table = self.writer.tables["neuron_memories"]
        for name, kind, tensor_id, number in rows:
            table.append(seq=seq, module_id=module_id, name=name, kind=kind, tensor_id=tensor_id, value=number)
        self._memory_snapshots[module_id] = values
