"""The TorchDispatchMode that writes one `events` row per dispatched aten op.

The mode runs the op first and describes its tensors afterwards, as SpikingJelly's counters
see them (an in-place op's first argument already holds the new values). Everything that
is not per-op work (stages, module hooks) lives in the recorder; what the op log needs of
it comes in a RecordingContext (capture/context.py).

The op's real result is returned whatever happens while recording it: a failure of the
capture is counted in the manifest's `degraded` list (capture/failures.py), never raised.
Rows that refer to each other are appended only once nothing can fail between them, so a
failure leaves no event_tensors row without its event and no op_stats row half written.

Under `torch.inference_mode()` composite ops arrive whole; while recording, the mode runs
them through their decomposition (capture/decompositions.py), so it records what `no_grad`
records.
"""

from __future__ import annotations

from array import array

import torch
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from capture.arguments import encode_call
from capture.packed_bits import bits_bytes, pack_bits
from capture.context import RecordingContext
from capture.op_statistics import EXPENSIVE, STATISTIC_FUNCTIONS, TERNARY_OF_FIRST_OPERAND, one_op
from capture.tensors import excluded_from_modes, has_values, immediate_stats
from capture.value_counts import SMALL_TENSOR
from capture.propagation import PROPAGATION, propagated
from capture.collectives import COLLECTIVES, collective_outputs, collective_row
from capture.decompositions import decomposition_plan, may_decompose, run_decomposed
from capture.tracker import in_recomputation
from schemas.statistics import OP_STATISTICS, STATISTICS, SYNAPTIC_INPUTS
from schemas.statistics_levels import SYNAPTIC_LEVEL_OPERANDS
from capture.table_buffer import BUFFER_GROUPS
from schemas.tables import TABLES

_op_names: dict = {}
_NOT_SCANNED = (None, None)  # statistics of a tensor left null on purpose (capture/collectives.py)
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


# The buffers' physical columns (capture/table_buffer.py BUFFER_GROUPS): an event's context
# fields are one interned tuple, and so are its call's (op, args, kwargs, out JSON) and a
# use's (role, position, name, item).
_EVENT_COLUMNS = ("seq", "$call", "$context")
_USE_COLUMNS = ("seq", "k", "$slot", "tensor_id")
_CONTEXT = BUFFER_GROUPS["events"]["$context"]


def _fields(columns, groups) -> set[str]:
    return {member for c in columns for member in groups.get(c, (c,))}


if (_fields(_EVENT_COLUMNS, BUFFER_GROUPS["events"]) != set(TABLES["events"].names)
        or _fields(_USE_COLUMNS, BUFFER_GROUPS["event_tensors"]) != set(TABLES["event_tensors"].names)
        or BUFFER_GROUPS["events"]["$call"] != ("op", "args", "kwargs", "out")
        or _CONTEXT != ("step", "stage_id", "stage", "phase", "grad_enabled", "in_backward", "thread", "scope_id",
                        "recompute")):
    raise AssertionError("capture.dispatch column lists are out of step with schemas.tables")


class RecordingMode(TorchDispatchMode):
    def __init__(self, context: RecordingContext, ops: "OpLog") -> None:
        super().__init__()
        self.context = context
        self.ops = ops
        self._redispatching: set = set()  # custom ops now inside their own autograd kernel

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
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
            with context.lock:
                try:
                    self.ops.record(func, args, kwargs, out)
                except Exception as exc:  # noqa: BLE001 - a capture failure: counted, never raised
                    context.report_failure("dispatch", _safe_op_name(func), exc, context.seq - 1)
        return out

    def _plan(self, func, args, kwargs):
        try:
            return decomposition_plan(func, args, kwargs, self._redispatching)
        except Exception as exc:  # noqa: BLE001 - a capture failure: the op is recorded as it comes
            self.context.report_failure("dispatch", _safe_op_name(func), exc, self.context.seq)
            return None


class OpPlan:
    """What the per-op path needs to know about an op, worked out once per OpOverload."""

    __slots__ = ("name", "collective", "written_positions", "written_names", "propagate", "statistics", "wanted",
                 "may_decompose")

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
        self.wanted = SYNAPTIC_LEVEL_OPERANDS.get(name, ()) if synaptic_level else ()


class OpLog:
    """Writes events, event_tensors, op_stats and packed_inputs rows for each op."""

    def __init__(self, context: RecordingContext) -> None:
        self.context = context
        tables = context.writer.tables
        self.events = tables["events"].columns
        self.uses = tables["event_tensors"].columns
        self.op_stats = tables["op_stats"].columns
        self.packed = tables["packed_inputs"].columns
        # Bound append methods in schema order: the per-op path calls them directly.
        self._event_appends = [self.events[name].append for name in _EVENT_COLUMNS]
        self._use_appends = [self.uses[name].append for name in _USE_COLUMNS]
        self._use_seqs = self.uses["seq"]
        self._event_seqs = self.events["seq"]
        self._flush_rows = context.writer.flush_rows
        # The last event context: its key (what it is made of) and the tuple the rows share.
        self._context_key: tuple | None = None
        self._context: tuple | None = None
        # (op, args, kwargs, out JSON) -> that very tuple: one object per distinct call shape,
        # which the events buffer holds per row (an op mostly recurs with the same arguments)
        self._calls: dict[tuple, tuple] = {}
        # id(OpOverload) -> OpPlan: torch keeps every OpOverload for the life of the process,
        # and id() avoids OpOverload's Python __hash__ on every op.
        self.plans: dict[int, OpPlan] = {}
        fast = context.fast_paths
        self._intern = "interned_arguments" in fast
        self._propagation = "propagated_statistics" in fast
        self._synaptic_level = context.value_statistics == "synaptic"
        # Level "none": no op scalar conditioned on 0/1 operands (only the spike counters and
        # energy models read them, and they need level "synaptic"); the NeuroBench ones
        # (condition "forward"), which serve its convention at any level, are still taken.
        self._spike_scalars = context.value_statistics != "none"
        # (row, value, valid): a statistic still on the device, and the 0-dim bool saying
        # whether its condition held (None: it did), both fetched at the next flush.
        self.pending_stats: list[tuple[int, torch.Tensor, torch.Tensor | None]] = []
        self.pending_packed: list[tuple[int, torch.Tensor]] = []
        # The both-binary check of a weight: (id, version) -> is01 on CPU, or the 0-dim bool
        # computing it on a device; on a device, (id, shape) -> is01 as last fetched.
        self._weight_binary: dict[tuple[int, int], bool | torch.Tensor] = {}
        self._weight_checks: list[tuple[tuple, torch.Tensor]] = []
        self._weight_fetched: dict[tuple, bool] = {}

    def record(self, func, args, kwargs, out) -> None:
        context = self.context
        registry = context.registry
        plan = self.plans.get(id(func))
        if plan is None:
            plan = self.plans[id(func)] = OpPlan(func, self._propagation, self._synaptic_level)
        seq = context.seq
        context.seq = seq + 1
        context.steps_recorded.add(context.step_index)
        name = context.current_record = plan.name
        args_json, kwargs_json, out_json, tensors = encode_call(args, kwargs, out, self._intern)

        collective = plan.collective
        written_positions, written_names = plan.written_positions, plan.written_names
        propagate, wanted_positions = plan.propagate, plan.wanted
        u = self._use_appends
        uses_before = len(self._use_seqs)
        described: dict[int, int] = {}  # id(tensor) -> tensor_id within this op (outputs alias inputs)
        try:
            for k, (t, slot) in enumerate(tensors):
                tensor_id = described.get(id(t))
                if tensor_id is None:
                    role, position, key = slot[0], slot[1], slot[2]
                    known = _NOT_SCANNED if collective else None
                    # A small output's scan costs what the rule costs (capture/value_counts.py)
                    if propagate is not None and role == "out" and t is out and t.numel() > SMALL_TENSOR:
                        known = propagated(propagate, args, kwargs, out, registry.stats_of)
                    written = (role == "arg" and position in written_positions) or (role == "kwarg" and key in written_names)
                    wanted = role == "arg" and position in wanted_positions
                    tensor_id = registry.describe(t, seq, known_stats=known, written=written, wanted=wanted)
                    described[id(t)] = tensor_id
                u[0](seq); u[1](k); u[2](slot); u[3](tensor_id)
            thread, scope_id = context.thread_index(), context.scope_id()
        except BaseException:
            for column in self.uses.values():  # no event_tensors rows for an event never written
                del column[uses_before:]
            raise

        stage, step = context.current_stage, context.step_index
        grad_enabled, in_backward = torch.is_grad_enabled(), torch._C._current_graph_task_id() != -1
        recompute = in_backward and in_recomputation(grad_enabled)
        key = (stage, step, grad_enabled, in_backward, thread, scope_id, recompute)
        if key != self._context_key:  # consecutive events mostly share it: one tuple for all of them
            self._context_key = key
            self._context = (step, None, "unlabeled", None, grad_enabled, in_backward, thread, scope_id, recompute) \
                if stage is None else \
                (step, stage.stage_id, stage.name, stage.phase, grad_enabled, in_backward, thread, scope_id, recompute)
        call = (name, args_json, kwargs_json, out_json)
        calls = self._calls
        if len(calls) > 65536:
            calls.clear()
        e = self._event_appends
        e[0](seq); e[1](calls.setdefault(call, call)); e[2](self._context)

        if collective or plan.statistics:  # rare ops, which may hold tensor subclasses: always guarded
            with excluded_from_modes():
                if collective:
                    self._collective(seq, name, func, args, kwargs, out)
                if plan.statistics:
                    self._op_statistics(name, seq, args, out)
        context.snapshot_memories(seq)
        rows = len(self._event_seqs)
        if rows % 4096 == 0 or rows >= self._flush_rows:  # what maybe_flush tests, without its call
            context.writer.maybe_flush()

    def _collective(self, seq: int, name: str, func, args, kwargs, out) -> None:
        try:
            row = collective_row(name, func, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001 - the event stays; its collectives row is lost
            self.context.report_failure("statistics", f"collective of {name}", exc, seq)
            return
        self.context.writer.tables["collectives"].append(seq=seq, **row)

    # -- per-op scalars ----------------------------------------------------------------------
    def _binary(self, t) -> bool | None:
        """True/False when the operand's 0/1-ness is known now, None when it is on a device."""
        if not isinstance(t, torch.Tensor):
            return False
        stats = self.context.registry.stats_of(t)
        return None if stats is None else bool(stats[1])

    def _weight_is_binary(self, w: torch.Tensor) -> bool | torch.Tensor:
        """Is the weight 0/1? On CPU a bool, read at once. On a device (or deferred) no wait:
        False when the last fetched check of this weight object said no (a statistic is then
        not taken until a fetched check says yes again), else a 0-dim bool on the device, the
        condition of a statistic taken speculatively and dropped at flush if it was False."""
        key = (id(w), w._version)
        known = self._weight_binary.get(key)
        if known is None:
            if len(self._weight_binary) > 4096:
                self._weight_binary.clear()
            with torch.no_grad():
                if w.device.type == "cpu" and not self.context.defer_statistics:
                    known = immediate_stats(w)[1]
                else:
                    known = ((w == 0) | (w == 1)).all()
                    self._weight_checks.append(((id(w), tuple(w.shape)), known))
            self._weight_binary[key] = known
        if isinstance(known, torch.Tensor) and self._weight_fetched.get((id(w), tuple(w.shape))) is False:
            return False
        return known

    def _op_statistics(self, name: str, seq: int, args, out) -> None:
        operands, statistic_names = OP_STATISTICS[name]
        tensors = [a for a in (*args, out) if isinstance(a, torch.Tensor)]
        if not all(t.layout is torch.strided and has_values(t) for t in tensors):
            return  # values that cannot be read (a freed storage): the statistics are not taken
        flags = [self._binary(args[o.position]) if len(args) > o.position else False for o in operands]
        keep = self.context.keep_binary_inputs
        with torch.no_grad(), one_op(flags):  # what its statistics share comes from this op's operands
            for stat in statistic_names:
                # One statistic failing loses that statistic only (a `statistics` entry in `degraded`).
                try:
                    condition = STATISTICS[stat].condition
                    if condition == "forward":  # every call outside backward, whatever the values
                        if torch._C._current_graph_task_id() != -1:
                            continue
                    elif not self._spike_scalars:
                        continue
                    elif any(flag is False for flag in (flags[:1] if condition == "x_binary" else flags)):
                        continue
                    valid = None
                    if stat in EXPENSIVE and flags[-1] is None:
                        valid = self._weight_is_binary(args[operands[-1].position])
                        if valid is False:
                            continue
                        valid = valid if isinstance(valid, torch.Tensor) else None
                    if stat in TERNARY_OF_FIRST_OPERAND and flags[0] is True:
                        value = 1.0  # a 0/1 operand is ternary: no scan
                    else:
                        value = STATISTIC_FUNCTIONS[stat](args, out)
                    self._append_stat(seq, stat, value, valid)
                except Exception as exc:  # noqa: BLE001 - see the module docstring
                    self.context.report_failure("statistics", f"{stat} of {name}", exc, seq)
            if keep:
                for position, flag in zip(SYNAPTIC_INPUTS[name], flags):
                    if flag is not False:
                        try:
                            self._append_packed(seq, position, args[position])
                        except Exception as exc:  # noqa: BLE001
                            self.context.report_failure("statistics", f"packed input {position} of {name}", exc, seq)

    def _append_stat(self, seq: int, stat: str, value, valid: torch.Tensor | None = None) -> None:
        columns = self.op_stats
        pending = isinstance(value, torch.Tensor) and (value.device.type != "cpu" or self.context.defer_statistics)
        if not pending:
            value = float(value)  # before any append: a failure here leaves no partial row
        columns["seq"].append(seq)
        columns["stat"].append(stat)
        if pending:
            self.pending_stats.append((len(columns["value"]), value, valid))
            columns["value"].append(None)
        else:
            columns["value"].append(value)

    def _append_packed(self, seq: int, position: int, t: torch.Tensor) -> None:
        columns = self.packed
        tensor_id = self.context.registry.entries[id(t)][2]
        bits = pack_bits(t)
        pending = bits.device.type != "cpu" or self.context.defer_statistics
        data = None if pending else bits_bytes(bits)
        columns["seq"].append(seq)
        columns["tensor_id"].append(tensor_id)
        columns["position"].append(position)
        columns["shape"].append(t.shape)
        if pending:
            self.pending_packed.append((len(columns["bits"]), bits))
        columns["bits"].append(data)

    def resolve_pending(self, _writer=None) -> None:
        """Fetch device-side op statistics, their conditions, the weight checks and packed
        inputs, one transfer per device (a before-flush hook); drop statistics whose
        condition did not hold."""
        by_device: dict[torch.device, list] = {}
        for row, value, valid in self.pending_stats:
            by_device.setdefault(value.device, []).append((row, value, valid))
        dropped = set()
        with excluded_from_modes():
            for items in by_device.values():
                ones = items[0][1].new_ones((), dtype=torch.float64)
                fetched = torch.stack([v.double() for _, v, _ in items] + [
                    ones if valid is None else valid.double() for _, _, valid in items]).cpu().tolist()
                for (row, _, _), value, holds in zip(items, fetched, fetched[len(items):]):
                    self.op_stats["value"][row] = value
                    if not holds:
                        dropped.add(row)
            if len(self._weight_fetched) > 4096:
                self._weight_fetched.clear()
            checks: dict[torch.device, list] = {}
            for key, flag in self._weight_checks:
                checks.setdefault(flag.device, []).append((key, flag))
            for items in checks.values():
                for (key, _), binary in zip(items, torch.stack([flag for _, flag in items]).cpu().tolist()):
                    self._weight_fetched[key] = bool(binary)
            for row, bits in self.pending_packed:
                self.packed["bits"][row] = bits_bytes(bits.cpu())
        if dropped:
            for column in self.op_stats.values():
                kept = [v for i, v in enumerate(column) if i not in dropped]
                column[:] = array(column.typecode, kept) if isinstance(column, array) else kept
        self.pending_stats.clear()
        self.pending_packed.clear()
        self._weight_checks.clear()
        self._weight_binary = {k: v for k, v in self._weight_binary.items() if not isinstance(v, torch.Tensor)}

