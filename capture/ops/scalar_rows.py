"""Per-op scalars: the op_stats and packed_inputs rows of ops a rule reads values of.

The statistics each shipped rule needs of an op's values (conv taps, GEMM sums, pair counts,
NeuroBench's scalars), under the conditions STATISTICS gives (0/1 operands,
forward only), and the packed 0/1 inputs a user asked to keep. On CPU read at once; on a
device kept there and fetched once per flush (resolve_pending), so capture adds no per-op
host sync: a condition on a device value (is the weight 0/1? is the operand, whose statistics
are pending too, 0/1?) is then checked at flush and its statistic dropped if it did not hold,
so a device run keeps exactly the rows a CPU run keeps.
"""

from __future__ import annotations

from array import array
from typing import Any

import torch

from spiketrace.capture.context import RecordingContext
from spiketrace.capture.ops.op_statistics import EXPENSIVE, STATISTIC_FUNCTIONS, TERNARY_OF_FIRST_OPERAND
from spiketrace.capture.ops.packed_bits import bits_bytes, pack_bits
from spiketrace.capture.ops.shared_operands import begin_op, end_op
from spiketrace.capture.tensors.device_statistics import PendingStats
from spiketrace.capture.tensors.nested import rows as nested_rows
from spiketrace.capture.tensors.registry import excluded_from_modes, has_values, immediate_stats
from spiketrace.capture.tensors.value_counts import ignoring_warnings
from spiketrace.schemas.statistics import OP_STATISTICS, STATISTICS, SYNAPTIC_INPUTS

# Each statistic's condition, looked up once per statistic a call may take.
_CONDITIONS = {name: statistic.condition for name, statistic in STATISTICS.items()}


class OpScalars:
    """Writes op_stats and packed_inputs rows for the ops OP_STATISTICS names."""

    def __init__(self, context: RecordingContext) -> None:
        self.context = context
        tables = context.writer.tables
        self.op_stats = tables["op_stats"].columns
        self.packed = tables["packed_inputs"].columns
        # Level "none": no op scalar conditioned on 0/1 operands (only the spike counters and
        # energy models read them, and they need level "synaptic"); the NeuroBench ones
        # (condition "forward"), which serve its convention at any level, are still taken.
        self._spike_scalars = context.value_statistics != "none"
        # (row, value, valid, operands): a statistic whose value or condition is still on the
        # device: its value (a tensor fetched at the next flush, or a float), the 0-dim bool
        # saying whether the weight was 0/1 (None: no such check), and the PendingStats of the
        # operands its condition needs 0/1 (resolved by the registry's flush hook, which runs
        # before this one).
        self.pending_stats: list[tuple[int, object, torch.Tensor | None, tuple[PendingStats, ...]]] = []
        # (row, bits still on the device or None, the pending statistics of an operand whose 0/1-ness
        # is checked at flush or None)
        self.pending_packed: list[tuple[int, torch.Tensor | None, PendingStats | None]] = []
        # The both-binary check of a weight: (id, version) -> is01 on CPU, or the 0-dim bool
        # computing it on a device; on a device, (id, shape) -> is01 as last fetched.
        self._weight_binary: dict[tuple[int, int], bool | torch.Tensor] = {}
        self._weight_checks: list[tuple[tuple, torch.Tensor]] = []
        self._weight_fetched: dict[tuple, bool] = {}

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

    def take(self, name: str, seq: int, args, out) -> None:
        operands, statistic_names = OP_STATISTICS[name]
        # Each operand's (nnz, is01) as the record just described it (None: not known now, on a
        # device) and whether it is 0/1: True/False when known, None when not, False for no tensor.
        values: list[Any] = [args[o.position] if len(args) > o.position else None for o in operands]
        registry = self.context.registry
        stats_of = registry.stats_of
        known = [stats_of(t) if isinstance(t, torch.Tensor) else None for t in values]
        flags = [(None if stats is None else bool(stats[1])) if isinstance(t, torch.Tensor) else False
                 for t, stats in zip(values, known)]
        # What this call takes, decided before anything reads a storage: most calls of a GEMM
        # (its backward ones, of analog operands) take nothing, and the checks below cost more
        # than the lookups above.
        spike = self._spike_scalars  # the conditions of STATISTICS: "forward" on every call
        holds = {"forward": torch._C._current_graph_task_id() == -1,  # outside backward, whatever the values
                 "x_binary": spike and False not in flags[:1], "both_binary": spike and False not in flags}
        taken = [stat for stat in statistic_names if holds[_CONDITIONS[stat]]]
        # The operands whose 0/1-ness a taken statistic's condition needs but which are still
        # pending on the device: checked at flush (resolve_pending).
        unknown = {} if None not in flags else {
            condition: tuple(s for s in (registry.pending_of(t) for t, flag in zip(values[:count], flags)
                                         if flag is None) if s is not None)
            for condition, count in (("x_binary", 1), ("both_binary", len(values)))}
        # (position, the operand's pending statistics: its 0/1-ness checked at flush, or None)
        packed = [(position, registry.pending_of(t) if flag is None else None)
                  for position, flag, t in zip(SYNAPTIC_INPUTS.get(name, ()), flags, values) if flag is not False] \
            if self.context.keep_binary_inputs else []
        if not taken and not packed:
            return
        if isinstance(out, torch.Tensor) and out.is_nested:
            # A Linear over a nested tensor: its statistics over the rows its components hold,
            # the same sums (capture/tensors/nested.py); no other op's are taken on one.
            if name != "aten.linear.default":
                return
            with excluded_from_modes():
                x, y = nested_rows(args[0]), nested_rows(out)
            if x is None or y is None:
                return
            args, out, packed = (x, *args[1:]), y, []  # no packed input: its row names a described state
        tensors = [a for a in (*args, out) if isinstance(a, torch.Tensor)]
        if not all(t.layout is torch.strided and has_values(t) for t in tensors):
            return  # values that cannot be read (a freed storage): the statistics are not taken
        # The ops the statistics run reach no dispatch mode (the operands may be tensor
        # subclasses, a user's mode may be active) and record no graph; what they share comes
        # from this op's operands (shared_operands.one_op, as calls: a generator's context
        # manager and torch.no_grad() cost more than the rest of a call that takes one scalar).
        grad_enabled = torch.is_grad_enabled()
        with excluded_from_modes():
            try:
                torch._C._set_grad_enabled(False)
                begin_op(flags, "native_operand_statistics" in self.context.fast_paths, known)
                self._take(name, seq, args, out, operands, taken, flags, packed, unknown)
            finally:
                end_op()
                torch._C._set_grad_enabled(grad_enabled)

    def _take(self, name: str, seq: int, args, out, operands, taken: list, flags: list, packed: list,
              unknown: dict) -> None:
        """The statistics and packed inputs take() decided on, each row appended whole."""
        for stat in taken:
            # One statistic failing loses that statistic only (a `statistics` entry in `degraded`).
            try:
                valid: torch.Tensor | None = None
                if stat in EXPENSIVE and flags[-1] is None:
                    binary = self._weight_is_binary(args[operands[-1].position])
                    if binary is False:
                        continue
                    valid = binary if isinstance(binary, torch.Tensor) else None
                if stat in TERNARY_OF_FIRST_OPERAND and flags[0] is True:
                    value = 1.0  # a 0/1 operand is ternary: no scan
                else:
                    try:
                        value = STATISTIC_FUNCTIONS[stat](args, out)
                    except Warning:  # torch warned and the user's filter made it an error
                        value = ignoring_warnings(STATISTIC_FUNCTIONS[stat], args, out)
                self._append_stat(seq, stat, value, valid, unknown.get(_CONDITIONS[stat], ()))
            except Exception as exc:  # noqa: BLE001 - see the module docstring
                self.context.report_failure("statistics", f"{stat} of {name}", exc, seq)
        for position, condition in packed:
            try:
                self._append_packed(seq, position, args[position], condition)
            except Exception as exc:  # noqa: BLE001 - see the module docstring
                self.context.report_failure("statistics", f"packed input {position} of {name}", exc, seq)

    def _append_stat(self, seq: int, stat: str, value, valid: torch.Tensor | None = None,
                     operands: tuple = ()) -> None:
        columns = self.op_stats
        on_device = isinstance(value, torch.Tensor) and (value.device.type != "cpu" or self.context.defer_statistics)
        if not on_device:
            value = float(value)  # before any append: a failure here leaves no partial row
        columns["seq"].append(seq)
        columns["stat"].append(stat)
        if on_device or valid is not None or operands:
            self.pending_stats.append((len(columns["value"]), value, valid, operands))
        columns["value"].append(None if on_device else value)

    def _append_packed(self, seq: int, position: int, t: torch.Tensor, condition=None) -> None:
        columns = self.packed
        tensor_id = self.context.registry.entries[id(t)][2]
        bits = pack_bits(t)
        pending = bits.device.type != "cpu" or self.context.defer_statistics
        data = None if pending else bits_bytes(bits)
        columns["seq"].append(seq)
        columns["tensor_id"].append(tensor_id)
        columns["position"].append(position)
        columns["shape"].append(t.shape)
        if pending or condition is not None:
            self.pending_packed.append((len(columns["bits"]), bits if pending else None, condition))
        columns["bits"].append(data)

    def resolve_pending(self, _writer=None) -> None:
        """Fetch device-side op statistics, their conditions, the weight checks and packed
        inputs, one transfer per device (a before-flush hook); drop statistics whose
        condition did not hold."""
        by_device: dict[torch.device, list] = {}
        dropped = set()
        for row, value, valid, operands in self.pending_stats:
            on_device = value if isinstance(value, torch.Tensor) else valid  # what the flush fetches
            if any(s.is01 is False for s in operands):  # an operand's values were not 0/1 after all
                dropped.add(row)
            elif on_device is not None:
                by_device.setdefault(on_device.device, []).append((row, value, valid))
        with excluded_from_modes():
            for device, items in by_device.items():
                ones = torch.ones((), dtype=torch.float64, device=device)
                fetched = torch.stack([v.double() if isinstance(v, torch.Tensor) else ones.new_tensor(v)
                                       for _, v, _ in items] +
                                      [ones if valid is None else valid.double() for _, _, valid in items]).cpu().tolist()
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
            dropped_packed = set()
            for row, bits, condition in self.pending_packed:
                if condition is not None and condition.is01 is False:  # not 0/1 after all
                    dropped_packed.add(row)
                elif bits is not None:
                    self.packed["bits"][row] = bits_bytes(bits.cpu())
        for table, rows in ((self.op_stats, dropped), (self.packed, dropped_packed)):
            for column in table.values() if rows else ():
                kept = [v for i, v in enumerate(column) if i not in rows]
                column[:] = array(column.typecode, kept) if isinstance(column, array) else kept
        self.pending_stats.clear()
        self.pending_packed.clear()
        self._weight_checks.clear()
        self._weight_binary = {k: v for k, v in self._weight_binary.items() if not isinstance(v, torch.Tensor)}

