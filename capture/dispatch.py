"""The TorchDispatchMode that writes one `events` row per dispatched aten op.

The mode runs the op first and describes its tensors afterwards, as SpikingJelly's counters
see them (an in-place op's first argument already holds the new values). Everything that
is not per-op work (stages, module hooks) lives in the recorder; what the op log needs of
it comes in a RecordingContext (capture/context.py).

The op's real result is returned whatever happens while recording it: a failure of the
capture is counted in the manifest's `degraded` list (capture/failures.py), never raised.
Rows that refer to each other are appended only once nothing can fail between them, so a
failure leaves no event_tensors row without its event and no op_stats row half written.
"""

from __future__ import annotations

import torch
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from capture.arguments import encode_call
from capture.context import RecordingContext
from capture.op_statistics import EXPENSIVE, STATISTIC_FUNCTIONS
from capture.tensors import excluded_from_modes, immediate_stats
from capture.propagation import PROPAGATION
from schemas.statistics import OP_STATISTICS, STATISTICS, SYNAPTIC_INPUTS
from schemas.tables import TABLES

_op_names: dict = {}
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


def pack_bits(t: torch.Tensor) -> torch.Tensor:
    """Row-major 0/1 values packed 8 per byte, most significant bit first (stays on device)."""
    flat = (t.reshape(-1) != 0).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=t.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


_EVENT_COLUMNS = ("seq", "op", "step", "stage_id", "stage", "phase", "grad_enabled", "in_backward", "thread",
                  "scope_id", "args", "kwargs", "out")
_USE_COLUMNS = ("seq", "k", "role", "position", "name", "item", "tensor_id")
if set(_EVENT_COLUMNS) != set(TABLES["events"].names) or set(_USE_COLUMNS) != set(TABLES["event_tensors"].names):
    raise AssertionError("capture.dispatch column lists are out of step with schemas.tables")


class RecordingMode(TorchDispatchMode):
    def __init__(self, context: RecordingContext, ops: "OpLog") -> None:
        super().__init__()
        self.context = context
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)  # the user's op: its own errors are the user's, raised as ever
        context = self.context
        if context.recording:
            with context.lock, excluded_from_modes():
                try:
                    self.ops.record(func, args, kwargs, out)
                except Exception as exc:  # noqa: BLE001 - a capture failure: counted, never raised
                    context.report_failure("dispatch", _safe_op_name(func), exc, context.seq - 1)
        return out


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
        self.pending_stats: list[tuple[int, torch.Tensor]] = []
        self.pending_packed: list[tuple[int, torch.Tensor]] = []
        # (id(weight), version) -> is01 for the expensive both-binary check off CPU.
        self._weight_binary: dict[tuple[int, int], bool] = {}

    def record(self, func, args, kwargs, out) -> None:
        context = self.context
        registry = context.registry
        seq = context.take_seq()
        name = op_name(func)
        context.current_record = name
        args_json, kwargs_json, out_json, tensors = encode_call(args, kwargs, out)

        written_positions, written_names = written_arguments(func)
        propagate = PROPAGATION.get(name)
        u = self._use_appends
        uses_before = len(self._use_seqs)
        described: dict[int, int] = {}  # id(tensor) -> tensor_id within this op (outputs alias inputs)
        try:
            for k, (t, role, position, key, item) in enumerate(tensors):
                tensor_id = described.get(id(t))
                if tensor_id is None:
                    known = None
                    if propagate is not None and role == "out" and t is out:
                        known = _propagated(propagate, args, kwargs, out, registry.stats_of)
                    written = (role == "arg" and position in written_positions) or (role == "kwarg" and key in written_names)
                    tensor_id = registry.describe(t, seq, known_stats=known, written=written)
                    described[id(t)] = tensor_id
                u[0](seq); u[1](k); u[2](role); u[3](position); u[4](key); u[5](item); u[6](tensor_id)
            thread, scope_id = context.thread_index(), context.scope_id()
        except BaseException:
            for column in self.uses.values():  # no event_tensors rows for an event never written
                del column[uses_before:]
            raise

        stage = context.current_stage
        e = self._event_appends
        e[0](seq); e[1](name); e[2](context.step_index)
        if stage is None:
            e[3](None); e[4]("unlabeled"); e[5](None)
        else:
            e[3](stage.stage_id); e[4](stage.name); e[5](stage.phase)
        e[6](torch.is_grad_enabled()); e[7](torch._C._current_graph_task_id() != -1)
        e[8](thread); e[9](scope_id)
        e[10](args_json); e[11](kwargs_json); e[12](out_json)

        if name in OP_STATISTICS:
            self._op_statistics(name, seq, args, out)
        context.snapshot_memories(seq)
        context.writer.maybe_flush()

    # -- per-op scalars ----------------------------------------------------------------------
    def _binary(self, t) -> bool | None:
        """True/False when the operand's 0/1-ness is known now, None when it is on a device."""
        if not isinstance(t, torch.Tensor):
            return False
        stats = self.context.registry.stats_of(t)
        return None if stats is None else bool(stats[1])

    def _weight_is_binary(self, w: torch.Tensor) -> bool:
        key = (id(w), w._version)
        known = self._weight_binary.get(key)
        if known is None:
            with torch.no_grad():
                known = immediate_stats(w)[1]  # waits on the device: once per weight version
            if len(self._weight_binary) > 4096:
                self._weight_binary.clear()
            self._weight_binary[key] = known
        return known

    def _op_statistics(self, name: str, seq: int, args, out) -> None:
        operands, statistic_names = OP_STATISTICS[name]
        flags = [self._binary(args[o.position]) if len(args) > o.position else False for o in operands]
        keep = self.context.keep_binary_inputs
        with torch.no_grad():
            for stat in statistic_names:
                # One statistic failing loses that statistic only (a `statistics` entry in `degraded`).
                try:
                    condition = STATISTICS[stat].condition
                    needed = flags[:1] if condition == "x_binary" else flags
                    if any(flag is False for flag in needed):
                        continue
                    if stat in EXPENSIVE and flags[-1] is None and not self._weight_is_binary(args[operands[-1].position]):
                        continue
                    self._append_stat(seq, stat, STATISTIC_FUNCTIONS[stat](args, out))
                except Exception as exc:  # noqa: BLE001 - see the module docstring
                    self.context.report_failure("statistics", f"{stat} of {name}", exc, seq)
            if keep:
                for position, flag in zip(SYNAPTIC_INPUTS[name], flags):
                    if flag is not False:
                        try:
                            self._append_packed(seq, position, args[position])
                        except Exception as exc:  # noqa: BLE001
                            self.context.report_failure("statistics", f"packed input {position} of {name}", exc, seq)

    def _append_stat(self, seq: int, stat: str, value) -> None:
        columns = self.op_stats
        pending = isinstance(value, torch.Tensor) and (value.device.type != "cpu" or self.context.defer_statistics)
        if not pending:
            value = float(value)  # before any append: a failure here leaves no partial row
        columns["seq"].append(seq)
        columns["stat"].append(stat)
        if pending:
            self.pending_stats.append((len(columns["value"]), value))
            columns["value"].append(None)
        else:
            columns["value"].append(value)

    def _append_packed(self, seq: int, position: int, t: torch.Tensor) -> None:
        columns = self.packed
        tensor_id = self.context.registry.entries[id(t)][2]
        bits = pack_bits(t)
        pending = bits.device.type != "cpu" or self.context.defer_statistics
        data = None if pending else _to_bytes(bits)
        columns["seq"].append(seq)
        columns["tensor_id"].append(tensor_id)
        columns["position"].append(position)
        columns["shape"].append(t.shape)
        if pending:
            self.pending_packed.append((len(columns["bits"]), bits))
        columns["bits"].append(data)

    def resolve_pending(self, _writer=None) -> None:
        """Fetch device-side op statistics and packed inputs (a before-flush hook)."""
        by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        for row, value in self.pending_stats:
            by_device.setdefault(value.device, []).append((row, value))
        with excluded_from_modes():
            for items in by_device.values():
                values = torch.stack([v.double() for _, v in items]).cpu().tolist()
                for (row, _), value in zip(items, values):
                    self.op_stats["value"][row] = value
            for row, bits in self.pending_packed:
                self.packed["bits"][row] = _to_bytes(bits.cpu())
        self.pending_stats.clear()
        self.pending_packed.clear()


def _propagated(propagate, args, kwargs, out, known):
    """A propagation rule's (nnz, is01), or None (scan instead) if the rule cannot apply."""
    try:
        return propagate(args, kwargs, out, known)
    except Exception:  # noqa: BLE001 - scanning gives the same values: nothing is lost
        return None


def _to_bytes(bits: torch.Tensor) -> bytes:
    try:
        return bits.numpy().tobytes()
    except (RuntimeError, ImportError):  # torch built or run without numpy
        return bytes(bits.tolist())
