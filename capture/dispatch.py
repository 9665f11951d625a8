"""The TorchDispatchMode that writes one `events` row per dispatched aten op.

The mode runs the op first and describes its tensors afterwards, as SpikingJelly's counters
see them (an in-place op's first argument already holds the new values). Everything that
is not per-op work (stages, module hooks, flushing) lives in the recorder.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import torch
from torch.overrides import resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from capture.arguments import encode_call
from capture.op_statistics import EXPENSIVE, STATISTIC_FUNCTIONS
from capture.tensors import excluded_from_modes, immediate_stats
from capture.propagation import PROPAGATION
from schemas.statistics import OP_STATISTICS, STATISTICS, SYNAPTIC_INPUTS

if TYPE_CHECKING:
    from capture.recorder import Recorder

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


def pack_bits(t: torch.Tensor) -> torch.Tensor:
    """Row-major 0/1 values packed 8 per byte, most significant bit first (stays on device)."""
    flat = (t.reshape(-1) != 0).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=t.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


class RecordingMode(TorchDispatchMode):
    def __init__(self, recorder: "Recorder") -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        recorder = self.recorder
        if recorder.recording:
            with recorder.lock, excluded_from_modes():
                recorder.ops.record(func, args, kwargs, out)
        return out


class OpLog:
    """Writes events, event_tensors, op_stats and packed_inputs rows for each op."""

    def __init__(self, recorder: "Recorder") -> None:
        self.recorder = recorder
        tables = recorder.writer.tables
        self.events = tables["events"].columns
        self.uses = tables["event_tensors"].columns
        self.op_stats = tables["op_stats"].columns
        self.packed = tables["packed_inputs"].columns
        self.pending_stats: list[tuple[int, torch.Tensor]] = []
        self.pending_packed: list[tuple[int, torch.Tensor]] = []
        # (id(weight), version) -> is01 for the expensive both-binary check off CPU.
        self._weight_binary: dict[tuple[int, int], bool] = {}

    def record(self, func, args, kwargs, out) -> None:
        recorder = self.recorder
        registry = recorder.registry
        seq = recorder.take_seq()
        name = op_name(func)
        args_json, kwargs_json, out_json, tensors = encode_call(args, kwargs, out)

        written_positions, written_names = written_arguments(func)
        propagate = PROPAGATION.get(name)
        uses = self.uses
        described: dict[int, int] = {}  # id(tensor) -> tensor_id within this op (outputs alias inputs)
        for k, (t, role, position, key, item) in enumerate(tensors):
            tensor_id = described.get(id(t))
            if tensor_id is None:
                known = None
                if propagate is not None and role == "out" and t is out:
                    known = propagate(args, kwargs, out, registry.stats_of)
                written = (role == "arg" and position in written_positions) or (role == "kwarg" and key in written_names)
                tensor_id = registry.describe(t, seq, known_stats=known, written=written)
                described[id(t)] = tensor_id
            uses["seq"].append(seq)
            uses["k"].append(k)
            uses["role"].append(role)
            uses["position"].append(position)
            uses["name"].append(key)
            uses["item"].append(item)
            uses["tensor_id"].append(tensor_id)

        events = self.events
        stage = recorder.current_stage
        events["seq"].append(seq)
        events["op"].append(name)
        events["step"].append(recorder.step_index)
        events["stage_id"].append(stage.stage_id if stage else None)
        events["stage"].append(stage.name if stage else "unlabeled")
        events["phase"].append(stage.phase if stage else None)
        events["grad_enabled"].append(torch.is_grad_enabled())
        events["in_backward"].append(torch._C._current_graph_task_id() != -1)
        events["thread"].append(recorder.thread_index())
        events["scope_id"].append(recorder.scope_id())
        events["args"].append(args_json)
        events["kwargs"].append(kwargs_json)
        events["out"].append(out_json)

        if name in OP_STATISTICS:
            self._op_statistics(name, seq, args, out)
        recorder.snapshot_memories(seq)
        recorder.writer.maybe_flush()

    # -- per-op scalars ----------------------------------------------------------------------
    def _binary(self, t) -> bool | None:
        """True/False when the operand's 0/1-ness is known now, None when it is on a device."""
        if not isinstance(t, torch.Tensor):
            return False
        stats = self.recorder.registry.stats_of(t)
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
        keep = self.recorder.keep_binary_inputs
        with torch.no_grad():
            for stat in statistic_names:
                condition = STATISTICS[stat].condition
                needed = flags[:1] if condition == "x_binary" else flags
                if any(flag is False for flag in needed):
                    continue
                if stat in EXPENSIVE and flags[-1] is None and not self._weight_is_binary(args[operands[-1].position]):
                    continue
                value = STATISTIC_FUNCTIONS[stat](args, out)
                self._append_stat(seq, stat, value)
            if keep:
                for position, flag in zip(SYNAPTIC_INPUTS[name], flags):
                    if flag is not False:
                        self._append_packed(seq, position, args[position])

    def _append_stat(self, seq: int, stat: str, value) -> None:
        columns = self.op_stats
        columns["seq"].append(seq)
        columns["stat"].append(stat)
        if isinstance(value, torch.Tensor):
            if value.device.type == "cpu" and not self.recorder.defer_statistics:
                columns["value"].append(float(value))
            else:
                self.pending_stats.append((len(columns["value"]), value))
                columns["value"].append(None)
        else:
            columns["value"].append(float(value))

    def _append_packed(self, seq: int, position: int, t: torch.Tensor) -> None:
        columns = self.packed
        registry = self.recorder.registry
        columns["seq"].append(seq)
        columns["tensor_id"].append(registry.entries[id(t)][2])
        columns["position"].append(position)
        columns["shape"].append(t.shape)
        bits = pack_bits(t)
        if bits.device.type == "cpu" and not self.recorder.defer_statistics:
            columns["bits"].append(_to_bytes(bits))
        else:
            self.pending_packed.append((len(columns["bits"]), bits))
            columns["bits"].append(None)

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


def _to_bytes(bits: torch.Tensor) -> bytes:
    try:
        return bits.numpy().tobytes()
    except (RuntimeError, ImportError):  # torch built or run without numpy
        return bytes(bits.tolist())
