"""Describing tensors: one `tensors` row per (object, version), value statistics, liveness.

A tensor object gets a `uid` the first time the capture sees it and keeps it while it lives
(a weakref callback records when it dies, in `tensor_frees`). It gets a new `tensor_id`
(a new described state) whenever its `_version` counter, shape or requires_grad changed since
it was last described (after an in-place op; autograd sets requires_grad on an op's output
only after the op returned), so every row shows what an op really saw.

Value statistics (nnz, is01) are taken with the Python dispatch key excluded, so no mode
(ours or the user's) sees these extra ops. On CPU they are read at once: `.item()` is no
device sync there, and a first-element check skips the second scan for most non-binary
tensors. On other devices (and on CPU under defer_statistics) the device writes them into slots
of a preallocated buffer, fetched in one transfer per flush (capture/tensors/device_statistics.py),
so capture adds no per-op host sync.

Statistics never touch a user tensor's storage: no `.numpy()` on it, which would mark its
storage non-resizable for good (FSDP2 frees parameters with `resize_(0)`, `out=` ops resize
their output). They count on tensors the capture itself made from it. Nor do they read a
tensor whose storage is not allocated (FSDP2's unsharded parameters keep their shape while
their storage is freed): its statistics are left null (`has_values`).

A row is appended whole, and the registry remembers a state only once its row is written,
so a failure while describing leaves neither a half row nor an id that names no row.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from spiketrace.capture.native.counters import new_counter
from spiketrace.capture.store.table_buffer import TableBuffer
from spiketrace.capture.tensors.device_statistics import PendingStats, StatisticSlots
from spiketrace.capture.tensors.nested import all_ints, odd_form
from spiketrace.capture.tensors.value_counts import (  # module globals: tests inject failures here
    ignoring_warnings,
    immediate_stats,
    python_stats,
)
from spiketrace.schemas.plausibility import NO_STORAGE, NO_VERSION_COUNTER

_PYTHON_KEY = torch._C.DispatchKeySet(torch._C.DispatchKey.Python)


def excluded_from_modes():
    """A guard under which tensor ops reach no Python dispatch mode (ours or anyone's)."""
    return torch._C._ExcludeDispatchKeyGuard(_PYTHON_KEY)


_dispatch_stack_depth = torch._C._len_torch_dispatch_stack


def modes_would_see() -> bool:
    """Whether an op run now would reach a dispatch mode: inside our own __torch_dispatch__
    our mode is stashed, so unless another mode (the user's) is on the stack, the capture's
    own ops reach no mode and need no excluded_from_modes() guard, whose construction costs
    more than the small statistic it would guard."""
    return _dispatch_stack_depth() > 0


def _dtype_name(dtype: torch.dtype, _cache: dict[torch.dtype, str] = {}) -> str:  # noqa: B006 - a memo, shared on purpose
    name = _cache.get(dtype)
    if name is None:
        name = _cache[dtype] = str(dtype).removeprefix("torch.")
    return name


def storage_pointer(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, nested, tensors without storage
        return NO_STORAGE


# The buffer's physical columns: a row's form (shape, stride, storage_offset, numel, dtype,
# element_size, device, requires_grad, is_meta, is_parameter, parameter) is one interned tuple
# (the buffer's group "$form"): the same activations recur every step.
ROW_COLUMNS = _ROW_COLUMNS = ("tensor_id", "uid", "version", "first_seq", "$form", "storage_ptr", "nnz", "is01")
_FORM = ("shape", "stride", "storage_offset", "numel", "nested_shapes", "dtype", "element_size", "device",
         "requires_grad", "is_meta", "is_parameter", "parameter")


def has_values(t: torch.Tensor) -> bool:
    """The tensor's storage holds every element it views now: allocated, and long enough for
    its offset and extent. FSDP2 frees a parameter's storage with resize_(0) and sizes storages
    it allocates later, and a user may shrink one, while tensors keep viewing them; reading
    such a tensor reads memory the capture does not own. (capture/native/record/forms.c's
    storage_holds is the compiled record's same check.)"""
    try:
        if t.numel() == 0:
            return True
        last = t.storage_offset()
        for size, step in zip(t.shape, t.stride()):
            if step < 0:
                return False
            last += (size - 1) * step
        storage = t.untyped_storage()
        return bool(storage.data_ptr()) and (last + 1) * t.element_size() <= storage.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):  # no storage to read (sparse, nested, ...)
        return False


# The statistics of a state the "synaptic" level left out (a unique object: compared by identity).
_SKIPPED = tuple([None, None])


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # no subclass __torch_dispatch__ behind tolist()

class TensorRegistry:
    """Assigns ids to tensors and writes their `tensors` rows."""

    def __init__(
        self,
        rows: TableBuffer,
        frees: TableBuffer,
        next_seq: Callable[[], int],
        parameter_names: dict[int, str],
        value_statistics: str = "full",
        defer_statistics: bool = False,
        report_failure: Callable[[BaseException, int], None] | None = None,
        native_scan: bool = True,
    ) -> None:
        self.rows = rows
        self.frees = frees
        self.next_seq = next_seq
        self.parameter_names = parameter_names
        # The level (schemas/statistics_levels.py): "full" takes statistics of every state,
        # "synaptic" only where the caller asks (wanted=True), "none" never.
        self.value_statistics = value_statistics != "none"
        self.every_state = value_statistics == "full"
        # Keep statistics on the device until flush even on CPU: the accelerator code path,
        # selectable so tests can run it without one.
        self.defer_statistics = defer_statistics
        # CPU statistics by the compiled one-pass scan where it was built (fast path
        # native_statistics), else by python_stats: the same numbers.
        self.native_scan = native_scan
        # Statistics that fail are recorded as not taken (null) and reported here.
        self.report_failure = report_failure
        # id(tensor) -> [uid, version, tensor_id, shape, weakref, stats, requires_grad]
        self.entries: dict[int, list] = {}
        # (row number since the buffer began, stats) to fill at flush: a row appended while a
        # flush writes stays buffered, so its index shifts by what the flush drops (rows.dropped)
        self.pending: list[tuple[int, PendingStats]] = []
        self.slots = StatisticSlots()  # where the device counts them (capture/tensors/device_statistics.py)
        # The next uid and tensor id to give (counters the compiled record advances in C).
        self.uids = new_counter()
        self.tensor_ids = new_counter()
        # id(weakref) -> (id(tensor), uid). Keyed by the weakref's id, not the weakref: hashing
        # a weakref hashes its tensor, and Tensor.__hash__ is Python code (a frame per described
        # tensor). The id is the weakref's alone while its entry lives: the entry holds it, and
        # entries go only in _freed, which runs once the tensor (and then the weakref) is gone.
        self._refs: dict[int, tuple[int, int]] = {}
        # (dtype, device) -> (dtype name, element size, device string)
        self._kinds: dict[tuple, tuple[str, int, str]] = {}
        # (dtype, device, requires_grad, is_meta, parameter name) -> the interned kind tuple
        self._row_kinds: dict[tuple, tuple] = {}
        if set(_ROW_COLUMNS) != set(rows.columns) or rows.groups.get("$form") != _FORM or \
                rows.sentinels != {"nnz": -1, "is01": -1}:
            raise AssertionError("spiketrace.capture.tensors.registry._ROW_COLUMNS is out of step with "
                                 "spiketrace.schemas.tables.TENSORS")
        self._columns = [rows.columns[name] for name in _ROW_COLUMNS]
        # (shape, stride, storage_offset, numel, kind) -> the row's interned form tuple
        self._forms: dict[tuple, tuple] = {}
        self._append = [column.append for column in self._columns]  # bound once: the hot path

    # -- liveness ---------------------------------------------------------------------------
    def _freed(self, ref: weakref.ref) -> None:
        popped = self._refs.pop(id(ref), None)
        if popped is None:
            return
        key, uid = popped
        frees = self.frees.columns
        frees["uid"].append(uid)
        frees["freed_seq"].append(self.next_seq())
        entry = self.entries.get(key)
        if entry is not None and entry[0] == uid:
            del self.entries[key]

    # -- describing ---------------------------------------------------------------------------
    def describe(self, t: torch.Tensor, seq: int, known_stats: tuple | None = None, written: bool = False,
                 wanted: bool = False) -> int:
        """The tensor_id of `t`'s current state, writing a row if this state is new.

        Its value statistics run under excluded_from_modes(), so they reach no dispatch mode.

        `known_stats` are (nnz, is01) the caller derived exactly (spiketrace.capture.tensors.propagation), used
        instead of scanning `t`. `written` marks an argument the op
        mutated: inside the dispatch mode its version counter is not bumped yet (autograd's
        ADInplaceOrView kernel bumps it after the Python key returns), so the state is
        described anew and remembered under the version it will have. `wanted` asks for
        statistics at the "synaptic" level; a state described before without them is then
        described again, with them.
        """
        key = id(t)
        entry = self.entries.get(key)
        try:
            version = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = NO_VERSION_COUNTER
        shape: tuple | None
        try:
            shape = t.shape
        except RuntimeError:  # a strided nested tensor has no single shape
            shape = None
        odd = None  # sizes that are not one int each (capture/tensors/nested.py): never in a column as they are
        if shape is None or (type(t) not in _PLAIN_TENSORS and not all_ints(shape)):
            with excluded_from_modes():
                odd = odd_form(t, shape)
            shape = (odd.shape, odd.nested_shapes)  # what the entry compares, as a plain tensor's torch.Size
        requires_grad = t.requires_grad
        stats = None
        take = self.every_state or (wanted and self.value_statistics)
        if entry is not None and not written and entry[1] == version and entry[3] == shape:
            skipped = entry[5] is _SKIPPED
            if entry[6] == requires_grad and not (skipped and take):
                return entry[2]
            # Only requires_grad changed (autograd marks an op's output after it returned):
            # a new row, but the values, and so the statistics, are the ones already taken.
            if not (skipped and take):
                stats = entry[5]
        if stats is None:
            if not take:
                stats = _SKIPPED
            elif known_stats is not None and self.value_statistics:
                stats = known_stats
            else:  # a nested tensor's: its buffer's, if one holds exactly its elements
                read = t if odd is None else odd.values
                stats = (None, None) if read is None else self._statistics(read, seq)
        tensor_id = self.tensor_ids.take()  # a failure below leaves a gap in the ids, never a reused one
        if entry is None:
            uid = self.uids.take()
        else:
            uid = entry[0]
        self._write_row(t, uid, version, tensor_id, seq, stats, shape, requires_grad, odd)
        if entry is None:
            ref = weakref.ref(t, self._freed)
            self._refs[id(ref)] = (key, uid)
            entry = self.entries[key] = [uid, None, None, None, ref, None, None]
        # An argument the op mutates gets the version it will have once the op returned.
        entry[1] = version + 1 if written and version >= 0 else version
        entry[2], entry[3], entry[5], entry[6] = tensor_id, shape, stats, requires_grad
        return tensor_id

    def _statistics(self, t: torch.Tensor, seq: int):
        if not self.value_statistics or t.is_meta or t.layout is not torch.strided or not has_values(t):
            return (None, None)
        # Under excluded_from_modes() whenever a mode would see them, taken here and only here
        # (the per-op path holds no guard otherwise). They are not differentiable: no no_grad.
        try:
            if not self.defer_statistics and t.device.type == "cpu":  # the CPU path (deferred: pend_row)
                scan = immediate_stats if self.native_scan else python_stats
                if type(t) in _PLAIN_TENSORS and not _dispatch_stack_depth():  # modes_would_see(), inlined
                    return scan(t)
                with excluded_from_modes():
                    return scan(t)
            with excluded_from_modes():
                values = t.dequantize() if t.is_quantized else t  # the values a quantized tensor reads as
                return self._queue(values)
        except Exception as exc:  # noqa: BLE001 - a capture failure, never the user's (capture/store/failures.py)
            if isinstance(exc, Warning):  # torch warned and the user's filter made it an error
                return ignoring_warnings(self._statistics, t, seq)
            if t.is_nested or torch._C._functorch.is_functorch_wrapped_tensor(t):
                return (None, None)  # values behind a transform's or a nested wrapper: none to read
            if self.report_failure is not None:
                self.report_failure(exc, seq)
            return (None, None)

    def kind_of(self, t: torch.Tensor) -> tuple[str, int, str]:
        """(dtype name, element size, device string) of `t`, cached by (dtype, device)."""
        kind_key = (t.dtype, t.device)
        kind = self._kinds.get(kind_key)
        if kind is None:
            kind = self._kinds[kind_key] = (_dtype_name(t.dtype), t.element_size(), str(t.device))
        return kind

    def _write_row(self, t, uid, version, tensor_id, seq, stats, shape, requires_grad, odd=None) -> None:
        kind_key = (t.dtype, t.device)
        kind = self._kinds.get(kind_key)
        if kind is None:
            kind = self.kind_of(t)
        nested, held = None, t  # held: the tensor whose storage holds the elements
        if odd is None:
            strided = t.layout is torch.strided
            offset = t.storage_offset() if strided else 0
            stride = t.stride() if strided else ()
            numel = t.numel()
        else:  # its facts as nested.py read them; a jagged tensor's elements are in its values' storage
            shape, stride, offset, numel, nested = odd.shape, odd.stride, odd.storage_offset, odd.numel, odd.nested_shapes
            strided = nested is None and t.layout is torch.strided
            held = t if odd.storage_of is None else odd.storage_of
        is_meta = t.is_meta
        storage = None
        if strided and numel and not is_meta:
            # data_ptr = storage pointer + offset * element size, without building a storage object
            try:
                storage = t.data_ptr() - offset * kind[1]
            except RuntimeError:  # no storage: a torch.func transform's wrapped tensor
                pass
        if storage is None:
            storage = storage_pointer(held)
        name = self.parameter_names.get(id(t))
        pending = isinstance(stats, PendingStats)
        nnz, is01 = (None, None) if pending else stats
        # null is -1 in these array columns (the buffer's NULL_SENTINELS)
        nnz, is01 = -1 if nnz is None else nnz, -1 if is01 is None else is01
        row_key = (kind_key, requires_grad, is_meta, name)
        row_kind = self._row_kinds.get(row_key)
        if row_kind is None:
            if len(self._row_kinds) > 4096:
                self._row_kinds.clear()
            row_kind = self._row_kinds[row_key] = (kind[0], kind[1], kind[2], requires_grad, is_meta,
                                                   name is not None, name)
        form_key = (shape, stride, offset, numel, nested, row_kind)
        form = self._forms.get(form_key)
        if form is None:
            if len(self._forms) > 65536:
                self._forms.clear()
            form = self._forms[form_key] = (shape, stride, offset, numel, nested, *row_kind)
        # Everything is computed above, so these appends cannot stop halfway.
        a = self._append
        a[0](tensor_id); a[1](uid); a[2](version); a[3](seq); a[4](form); a[5](storage); a[6](nnz); a[7](is01)  # noqa: E702 - one row's appends, in column order
        if pending:
            self.pending.append((self.rows.dropped + len(self._columns[0]) - 1, stats))

    def pend_row(self, t: torch.Tensor, seq: int, stats: PendingStats | tuple | None):
        """The compiled record's device-path statistics for the row it just appended (nulls until
        flush): `stats` a state's pending ones it reuses (only requires_grad changed), else
        queued now for t, a plain strided tensor whose storage the record checked holds it (no
        second check): on its device, or on CPU by the CPU's own kernel, the compiled scan,
        where the fast path native_statistics is on (capture/tensors/device_statistics.py).
        Noted for resolve_pending as _write_row notes the Python path's, or, counted at once by
        the CPU's kernel, filled in now; returns what the entry keeps (PendingStats, (nnz,
        is01), or (None, None) where none could be taken)."""
        if stats is None:
            stats = self._statistics(t, seq) if t.is_quantized else None  # its values are not its memory
        if stats is None:
            try:
                if _dispatch_stack_depth():  # a module hook's describe: our mode would see the ops
                    with excluded_from_modes():
                        stats = self._queue(t)
                else:  # inside the dispatch handler: no mode would
                    stats = self._queue(t)
            except Exception:  # noqa: BLE001 - taken again, where a failure is reported
                stats = self._statistics(t, seq)
        if isinstance(stats, PendingStats):
            self.pending.append((self.rows.dropped + len(self._columns[0]) - 1, stats))
        elif stats[0] is not None:  # the row's nulls (NULL_SENTINELS) become the numbers
            self._columns[6][-1], self._columns[7][-1] = stats
        return stats

    def _queue(self, t: torch.Tensor) -> PendingStats | tuple:
        """Counts queued on t's device, or on CPU those of the CPU's own kernel where the fast
        path native_statistics is on: ready at once, as a CPU kernel's are."""
        if self.native_scan and t.is_cpu:
            return immediate_stats(t)
        return self.slots.take(t)

    def pending_of(self, t: torch.Tensor) -> PendingStats | None:
        """The statistics of `t`'s described state where they are still pending on its device."""
        entry = self.entries.get(id(t))
        return entry[5] if entry is not None and isinstance(entry[5], PendingStats) else None

    def stats_of(self, t: torch.Tensor):
        """(nnz, is01) of `t`'s described state if known now (CPU, or a device's fetched at a
        flush since: a weight's from the next step on), else None."""
        entry = self.entries.get(id(t))
        if entry is None:
            return None
        stats = entry[5]
        if isinstance(stats, PendingStats):
            return None if stats.device is not None else (stats.nnz, stats.is01)
        return None if stats[0] is None else stats

    # -- flushing -----------------------------------------------------------------------------
    def resolve_pending(self, _writer=None) -> None:
        """Fetch every pending device statistic in one transfer per device and fill the rows."""
        if not self.pending:
            self.slots.discard()  # statistics of states whose rows were never written
            return
        with excluded_from_modes():
            fetched = self.slots.fetch()
        c, dropped = self.rows.columns, self.rows.dropped
        for row, stats in self.pending:
            if stats.device is not None:  # not resolved yet (a state's stats may fill several rows)
                stats.resolve(fetched.get(stats.device, []))  # none for a device whose states are all batched
            index = row - dropped
            if index < 0:  # its row was discarded (a failed flush drops what it buffered)
                continue
            # null is -1 in these array columns (the buffer's NULL_SENTINELS)
            c["nnz"][index] = -1 if stats.nnz is None else stats.nnz
            c["is01"][index] = -1 if stats.is01 is None else stats.is01
        self.pending.clear()
