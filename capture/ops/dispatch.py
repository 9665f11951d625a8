"""The TorchDispatchMode that writes one `events` row per dispatched aten op.

The mode runs the op first and describes its tensors afterwards, as SpikingJelly's counters
see them (an in-place op's first argument already holds the new values). Everything that
is not per-op work (stages, module hooks) lives in the recorder; what the op log needs of
it comes in a RecordingContext.

The op's real result is returned whatever happens while recording it: a failure of the
capture is counted in the manifest's `degraded` list (capture/store/failures.py), never raised.
Rows that refer to each other are appended only once nothing can fail between them, so a
failure leaves no event_tensors row without its event and no op_stats row half written.

Under `torch.inference_mode()` composite ops arrive whole; while recording, the mode runs
them through their decomposition, so it records what `no_grad` records.
"""

from __future__ import annotations

import torch
from torch._ops import OpOverload
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from spiketrace.capture import native
from spiketrace.capture.context import RecordingContext
from spiketrace.capture.modules.recomputation import in_recomputation
from spiketrace.capture.ops.arguments import encode_call
from spiketrace.capture.ops.collectives import COLLECTIVES, collective_outputs, collective_row
from spiketrace.capture.ops.decompositions import decomposition_plan, may_decompose, run_decomposed
from spiketrace.capture.ops.dynamo_frames import set_eval_frame, skip_code
from spiketrace.capture.ops.native_record import compiled_propagation, native_op_recorder
from spiketrace.capture.ops.scalar_rows import OpScalars
from spiketrace.capture.store.table_buffer import BUFFER_GROUPS, BUFFER_RUNS
from spiketrace.capture.tensors.propagation import PROPAGATION, propagated
from spiketrace.capture.tensors.registry import excluded_from_modes
from spiketrace.capture.tensors.value_counts import SMALL_TENSOR
from spiketrace.schemas.statistics import OP_STATISTICS
from spiketrace.schemas.statistics_levels import SYNAPTIC_LEVEL_OPERANDS
from spiketrace.schemas.tables import TABLES

_op_names: dict = {}
_NOT_SCANNED = (None, None)  # statistics of a tensor left null on purpose (a collective's buffers)


_written_arguments: dict = {}


def written_arguments(func) -> tuple[frozenset, frozenset]:
    """Positions and names of the arguments the op mutates (Tensor(a!) in its schema)."""
    found = _written_arguments.get(func)
    if found is None:
        schema = getattr(func, "_schema", None)
        arguments = schema.arguments if schema is not None else []
        writes = [(i, a.name) for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]
        found = _written_arguments[func] = (frozenset(i for i, _ in writes), frozenset(n for _, n in writes))
    return found


def op_name(func) -> str:
    name = _op_names.get(func)
    if name is None:
        name = _op_names[func] = resolve_name(func) or str(func)
    return name


def _safe_op_name(func) -> str:
    try:
        return op_name(func)
    except Exception:  # noqa: BLE001 - only for naming a failure
        return repr(func)


# The buffers' physical columns (BUFFER_GROUPS): an event's context
# is two interned tuples, its stage (which changes with every step) and where in the program
# it ran (which recurs from step to step), and so are its call's (op, args, kwargs, out JSON)
# and a use's (role, position, name, item).
_EVENT_COLUMNS = ("seq", "$call", "$stage", "$where")
_USE_COLUMNS = ("$slot", "tensor_id")  # per row; seq and k are held per event (BUFFER_RUNS)
# Distinct $where tuples kept for reuse (OpLog._wheres) before it starts over.
WHERES_KEPT = 65536


def _fields(columns, groups) -> set[str]:
    return {member for c in columns for member in groups.get(c, (c,))}


if (_fields(_EVENT_COLUMNS, BUFFER_GROUPS["events"]) != set(TABLES["events"].names)
        or _fields(_USE_COLUMNS, BUFFER_GROUPS["event_tensors"]) | set(BUFFER_RUNS["event_tensors"])
        != set(TABLES["event_tensors"].names)
        or BUFFER_GROUPS["events"]["$call"] != ("op", "args", "kwargs", "out")
        or BUFFER_GROUPS["events"]["$stage"] != ("step", "stage_id", "stage", "phase")
        or BUFFER_GROUPS["events"]["$where"] != ("grad_enabled", "in_backward", "thread", "scope_id", "recompute")):
    raise AssertionError("spiketrace.capture.ops.dispatch column lists are out of step with spiketrace.schemas.tables")


class RecordingMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps every mode's __torch_dispatch__ in torch._disable_dynamo, so TorchDynamo
        # never compiles the handler or what it calls: per op two more Python frames, an
        # import check and four eval-frame switches, a real share of a small op's cost. The
        # same effect, cheaper: the handler's code is marked
        # skip for Dynamo once (below the class) and it turns the eval-frame callback off
        # while it runs, as the wrapper does (capture/ops/dynamo_frames.py). A torch without
        # these switches keeps the wrapper.
        return set_eval_frame is None

    def __init__(self, context: RecordingContext, ops: OpLog) -> None:
        super().__init__()
        self.context = context
        self.ops = ops
        self._redispatching: set = set()  # custom ops now inside their own autograd kernel
        if ops.native is not None and "native_dispatch" in context.fast_paths:
            # The compiled handler (capture/native/record/dispatch.c) takes the calls of ops with a
            # compiled plan (OpLog.compiled) and hands the rest to this class's handler. As an
            # instance attribute it is what torch calls; its __self__ is this mode.
            self.__torch_dispatch__ = native._native.DispatchHandler(  # type: ignore[method-assign]  # an instance's own handler
                mode=self, recorder=ops.native, compiled=ops.compiled, context=context, lock=context.lock,
                set_eval_frame=set_eval_frame, in_python=type(self).__torch_dispatch__.__get__(self, type(self)),
                take_scalars=ops.scalars.take, record_in_python=ops.record_in_python, report=self._record_failed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        compiling = set_eval_frame(None) if set_eval_frame is not None else None  # see _should_skip_dynamo
        try:
            kwargs = kwargs or {}
            context = self.context
            known = self.ops.plans.get(id(func))  # an op known to be recorded as it comes skips the check
            if context.recording and (known is None or known.may_decompose) and may_decompose(func):
                plan = self._plan(func, args, kwargs)
                if plan is not None:
                    with self:  # the decomposed ops reach this mode again and are recorded
                        out = run_decomposed(plan, func, args, kwargs, self._redispatching)
                    if out is not NotImplemented:
                        return out
            out = func(*args, **kwargs)  # the user's op: its own errors are the user's, raised as ever
            if context.recording:
                # No exclusion guard here: our own mode is stashed while this method runs, and the
                # few ops the record runs (value statistics) take excluded_from_modes() themselves,
                # so no mode (ours or the user's) sees them.
                ops = self.ops
                with context.lock:
                    try:  # the compiled record takes the common call, the Python one the rest
                        if known is None:
                            ops.record(func, args, kwargs, out)  # a new op's first call: its plan is made there
                        elif not ops.took_natively(known, args, kwargs, out):
                            ops.record_in_python(known, func, args, kwargs, out)
                    except Exception as exc:  # noqa: BLE001 - a capture failure: counted, never raised
                        self._record_failed(func, exc)
            return out
        finally:
            if set_eval_frame is not None:
                set_eval_frame(compiling)

    def _record_failed(self, func, exc: Exception) -> None:
        """A failure of the record of func's call (either handler's): counted on its event."""
        self.context.report_failure("dispatch", _safe_op_name(func), exc, self.context.seq - 1)

    def _plan(self, func, args, kwargs):
        try:
            return decomposition_plan(func, args, kwargs, self._redispatching)
        except Exception as exc:  # noqa: BLE001 - a capture failure: the op is recorded as it comes
            self.context.report_failure("dispatch", _safe_op_name(func), exc, self.context.seq)
            return None


if skip_code is not None:  # Dynamo skips the handler's own frame (torch._dynamo.eval_frame.skip_code)
    skip_code(RecordingMode.__torch_dispatch__.__code__)


class OpPlan:
    """What the per-op path needs to know about an op, worked out once per OpOverload."""

    __slots__ = ("name", "collective", "written_positions", "written_names", "propagate", "statistics", "wanted",
                 "may_decompose", "native", "native_propagation")

    def __init__(self, func, propagation: bool = True, synaptic_level: bool = False) -> None:
        self.name = name = op_name(func)
        self.collective = name in COLLECTIVES
        self.written_positions, self.written_names = (
            collective_outputs(name, func) if self.collective else written_arguments(func)
        )
        self.propagate = PROPAGATION.get(name) if propagation else None
        self.statistics = name in OP_STATISTICS
        # Final once its first call was planned (a record follows the plan): False for an op
        # with no decomposition, whose per-call check is then skipped.
        self.may_decompose = may_decompose(func)
        # Positional operands whose statistics the "synaptic" level takes (all: empty here).
        self.wanted = frozenset(SYNAPTIC_LEVEL_OPERANDS.get(name, ()) if synaptic_level else ())
        # The compiled record takes its plain calls (no collective); per-op scalars are taken
        # after it, in Python (OpLog.took_natively).
        self.native = not self.collective
        self.native_propagation = compiled_propagation(name, self.propagate)


class OpLog:
    """Writes events, event_tensors, op_stats and packed_inputs rows for each op."""

    def __init__(self, context: RecordingContext) -> None:
        self.context = context
        tables = context.writer.tables
        self.events = tables["events"].columns
        self.uses = tables["event_tensors"].columns
        # Bound append methods in schema order: the per-op path calls them directly.
        self._event_appends = [self.events[name].append for name in _EVENT_COLUMNS]
        self._use_appends = [self.uses[name].append for name in _USE_COLUMNS]
        self._use_ids = self.uses["tensor_id"]
        # An event's seq and its number of event_tensors rows, once after its rows (BUFFER_RUNS)
        self._runs = runs = tables["event_tensors"]
        self._run_appends = (runs.run_values.append, runs.run_lengths.append)
        self._event_seqs = self.events["seq"]
        self._flush_rows = context.writer.flush_rows
        # The last event context: its key (what it is made of) and the two tuples the rows share;
        # $where tuples are interned across steps in _wheres (the compiled record's too), so a
        # scope met again reuses its tuple. Kept as two tuples, not one, because the stage
        # changes at every step while where an op ran recurs from step to step: two small sets
        # of tuples instead of one that grows with the steps.
        self._context_key: tuple | None = None
        self._stage: tuple | None = None
        self._where: tuple | None = None
        self._wheres: dict[tuple, tuple] = {}
        # (op, args, kwargs, out JSON) -> that very tuple: one object per distinct call shape,
        # which the events buffer holds per row (an op mostly recurs with the same arguments)
        self._calls: dict[tuple, tuple] = {}
        # id(OpOverload) -> OpPlan: torch keeps every OpOverload for the life of the process,
        # and id() avoids OpOverload's Python __hash__ on every op.
        self.plans: dict[int, OpPlan] = {}
        # id(OpOverload) -> what the compiled handler needs of its plan (the plan, the op's C
        # entry point OpOverload.__call__ calls, then record's arguments and whether the op has
        # per-op scalars): an op the compiled record takes and no decomposition may change.
        self.compiled: dict[int, tuple] = {}
        fast = context.fast_paths
        self._intern = "interned_arguments" in fast
        self._propagation = "propagated_statistics" in fast
        self._synaptic_level = context.value_statistics == "synaptic"
        self.scalars = OpScalars(context)  # op_stats and packed_inputs rows
        # The compiled record of the common call, or None where the extension was not built.
        self.native = native_op_recorder(context, self._calls, self._wheres, self._event_appends,
                                         (*self._run_appends, *self._use_appends))
        self.resolve_pending = self.scalars.resolve_pending

    def record(self, func, args, kwargs, out) -> None:
        """One call of `func`: by the compiled record where it takes it, else in Python."""
        plan = self.plans.get(id(func))
        if plan is None:
            plan = self.plans[id(func)] = OpPlan(func, self._propagation, self._synaptic_level)
            if plan.native and not plan.may_decompose and self.native is not None and type(func) is OpOverload:
                self.compiled[id(func)] = (plan, func._op, plan.name, plan.written_positions, plan.wanted,
                                           plan.native_propagation, plan.statistics)
        if not self.took_natively(plan, args, kwargs, out):
            self.record_in_python(plan, func, args, kwargs, out)

    def took_natively(self, plan: OpPlan, args, kwargs, out) -> bool:
        """Whether the compiled record took this call (it changes nothing when it does not).
        An op with per-op scalars (mm, addmm, convolution...) has them taken here after it,
        as record_in_python takes them after its rows: the same op_stats rows, on the event's
        seq. The compiled record has already flushed if its buffers were full, so these rows
        may be written by the next flush rather than with their event, as rows appended during
        a flush are; readers join the tables by seq across all parts."""
        if not plan.native or self.native is None:
            return False
        seq = self.native.record(plan.name, plan.written_positions, plan.wanted, plan.native_propagation, args,
                                 kwargs, out)
        if seq < 0:
            return False
        if plan.statistics:
            self.scalars.take(plan.name, seq, args, out)
        return True

    def record_in_python(self, plan: OpPlan, func, args, kwargs, out) -> None:
        context = self.context
        registry = context.registry
        seq = context.take_seq()
        name = context.current_record = plan.name
        args_json, kwargs_json, out_json, tensors = encode_call(args, kwargs, out, self._intern)

        collective = plan.collective
        written_positions, written_names = plan.written_positions, plan.written_names
        propagate, wanted_positions = plan.propagate, plan.wanted
        # Every tensor is described before any of the op's event_tensors rows is appended: a
        # failure reported while describing (a statistic that cannot be taken) drops partial rows
        # (RecordingContext.report_failure), and must find none of this op's, which would leave
        # its run longer than its rows ("rows end inside a run" at the next flush).
        described: dict[int, int] = {}  # id(tensor) -> tensor_id within this op (outputs alias inputs)
        ids = []
        for t, slot in tensors:
            tensor_id = described.get(id(t))
            if tensor_id is None:
                role, position, key = slot[0], slot[1], slot[2]
                known = _NOT_SCANNED if collective else None
                # A small output's scan costs what the rule costs (SMALL_TENSOR)
                if propagate is not None and role == "out" and t is out and t.numel() > SMALL_TENSOR:
                    known = propagated(propagate, args, kwargs, out, registry.stats_of)
                written = (role == "arg" and position in written_positions) or (role == "kwarg" and key in written_names)
                wanted = role == "arg" and position in wanted_positions
                tensor_id = described[id(t)] = registry.describe(t, seq, known_stats=known, written=written,
                                                                 wanted=wanted)
            ids.append(tensor_id)
        thread, scope_id = context.thread_index(), context.scope_id()

        stage, step = context.current_stage, context.step_index
        grad_enabled, in_backward = torch.is_grad_enabled(), torch._C._current_graph_task_id() != -1
        recompute = in_backward and in_recomputation(grad_enabled)
        key = (stage, step, grad_enabled, in_backward, thread, scope_id, recompute)
        if key != self._context_key:  # consecutive events mostly share it: one tuple for all of them
            previous, self._context_key = self._context_key, key
            if previous is None or previous[0] is not stage or previous[1] != step:
                self._stage = (step, None, "unlabeled", None) if stage is None else \
                    (step, stage.stage_id, stage.name, stage.phase)
            where, wheres = (grad_enabled, in_backward, thread, scope_id, recompute), self._wheres
            if len(wheres) > WHERES_KEPT:
                wheres.clear()
            self._where = wheres.setdefault(where, where)
        call = (name, args_json, kwargs_json, out_json)
        calls = self._calls
        if len(calls) > 65536:
            calls.clear()
        call = calls.setdefault(call, call)
        u, e = self._use_appends, self._event_appends
        lengths = (len(self._use_ids), len(self._runs.run_lengths), len(self._event_seqs))
        try:  # the op's rows: appends of values computed above, all of them or none
            for (_, slot), tensor_id in zip(tensors, ids):
                u[0](slot)
                u[1](tensor_id)
            if tensors:  # the rows' seq and count (their k: 0, 1, ... in this order)
                self._run_appends[0](seq)
                self._run_appends[1](len(tensors))
            e[0](seq)
            e[1](call)
            e[2](self._stage)
            e[3](self._where)
        except BaseException:
            self._truncate(*lengths)
            raise

        if collective:  # rare ops, which may hold tensor subclasses: always guarded
            with excluded_from_modes():
                self._collective(seq, name, func, args, kwargs, out)
        if plan.statistics:  # guarded inside, where it runs anything
            self.scalars.take(name, seq, args, out)
        context.snapshot_memories(seq)
        rows = len(self._event_seqs)
        if rows % 4096 == 0 or rows >= self._flush_rows:  # what maybe_flush tests, without its call
            context.writer.maybe_flush()

    def _truncate(self, uses: int, runs: int, events: int) -> None:
        """Back to these many event_tensors rows, runs and events rows: an op's rows cut short."""
        for column in self.uses.values():
            del column[uses:]
        del self._runs.run_values[runs:], self._runs.run_lengths[runs:]
        for column in self.events.values():
            del column[events:]

    def _collective(self, seq: int, name: str, func, args, kwargs, out) -> None:
        try:
            row = collective_row(name, func, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001 - the event stays; its collectives row is lost
            self.context.report_failure("statistics", f"collective of {name}", exc, seq)
            return
        if row is not None:  # always, for an op planned as a collective
            self.context.writer.tables["collectives"].append(seq=seq, **row)
