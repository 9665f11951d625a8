"""The compiled per-op record (capture/native/record/), bound to one recording.

OpLog (capture/ops/dispatch.py) hands the common call to it and records the rest itself; both
write into the same buffers with the same registry, interning tables and counters, which
this module passes to it as they are (the Python path's own objects, so the two paths
interleave freely and write the same rows).

What the record shares with the Python side is defined once, in the extension
(capture/native/record/interface.h): the numbers below are read from it, and each tuple of
bound appends it is given is bound, or checked, by the column names it exports in its order.
"""

from __future__ import annotations

import torch

from spiketrace.capture import native
from spiketrace.capture.modules import recomputation
from spiketrace.capture.ops import arguments
from spiketrace.capture.tensors import registry as tensors
from spiketrace.capture.tensors.propagation import binary_cast, concatenated, negated, one_minus_binary, same_elements

_native = native._native

# The numbers the extension defines, read from it. Where it is not built no compiled record
# reads them, and these fallbacks, the same numbers, stand in (tests/test_native_layout.py
# holds them equal to the extension's).
_PROPAGATIONS = ("NONE", "SAME", "PYTHON", "ADD", "MUL", "DIV", "BINARY_CAST", "NEGATE", "SUB", "ONE_MINUS", "CONCAT")
FALLBACK = {**{f"PROPAGATE_{name}": value for value, name in enumerate(_PROPAGATIONS)}, "MAX_TENSORS": 32}


def _shared(name: str) -> int:
    return getattr(_native, name) if _native is not None else FALLBACK[name]


# How the compiled record meets an op's propagation rule (capture/tensors/propagation.py). It
# applies same_elements (views, expand, clone), binary_cast, negated, one_minus_binary,
# concatenated (cat, stack) and the arithmetic rules itself (x + 0, x - 0, x * 1, x / 1, a 0/1
# x times 0, an all-zero operand of add or sub: capture/native/record/inherit.c and rules.c);
# other rules run in Python, so a large output, whose scan costs more than the Python path,
# goes there, and so does one whose arithmetic rule reads what the C code does not (a 0/1 x
# times another number: its rounding in x's dtype). tests/test_propagation_twins.py runs the
# compiled rules and the Python ones on the same operands.
(PROPAGATE_NONE, PROPAGATE_SAME, PROPAGATE_PYTHON, PROPAGATE_ADD, PROPAGATE_MUL, PROPAGATE_DIV,
 PROPAGATE_BINARY_CAST, PROPAGATE_NEGATE, PROPAGATE_SUB, PROPAGATE_ONE_MINUS,
 PROPAGATE_CONCAT) = (_shared(f"PROPAGATE_{name}") for name in _PROPAGATIONS)
APPLIED_IN_C = {same_elements: PROPAGATE_SAME, binary_cast: PROPAGATE_BINARY_CAST, negated: PROPAGATE_NEGATE,
                one_minus_binary: PROPAGATE_ONE_MINUS, concatenated: PROPAGATE_CONCAT}
ARITHMETIC_HANDLING = {"aten.add.Tensor": PROPAGATE_ADD, "aten.sub.Tensor": PROPAGATE_SUB,
                       "aten.mul.Tensor": PROPAGATE_MUL, "aten.div.Tensor": PROPAGATE_DIV}

# The tensors one call may hold in the compiled record; a tensor list argument's items get a
# slot each, up to all of them less the output and one spare.
MAX_TENSORS = _shared("MAX_TENSORS")
MAX_LISTED = MAX_TENSORS - 2


def compiled_propagation(name: str, rule) -> int:
    """The compiled record's handling of op `name` whose propagation rule is `rule` (None: none)."""
    if rule is None:
        return PROPAGATE_NONE
    if rule in APPLIED_IN_C:
        return APPLIED_IN_C[rule]
    return ARITHMETIC_HANDLING.get(name, PROPAGATE_PYTHON)


def _in_order(appends, expected: dict, names: tuple, what: str) -> tuple:
    """`appends` as a tuple, checked to be the bound appends of the columns `names` (the compiled
    record's order), `expected` mapping each name to its append."""
    appends = tuple(appends)
    if appends != tuple(expected[name] for name in names):
        raise AssertionError(f"the {what} appends are out of step with the compiled record's {names}")
    return appends


def native_op_recorder(context, calls: dict, wheres: dict, event_appends, use_appends):
    """The compiled per-op record (capture/native/record/) bound to this recording's buffers,
    registry and interning tables, or None where it does not apply: no extension, the fast
    path `native_record` switched off, or a recording whose CPU statistics the Python scan takes
    (fast path `native_statistics` off, statistics not deferred). Statistics kept on the device (a device tensor's, and
    every one's under defer_statistics) it takes through the registry's pend_row, so a CPU run
    with defer_statistics=True records through the code a GPU run does. `calls` and `wheres`:
    OpLog's interning of call and $where tuples; `event_appends`: its bound appends of the
    events columns, in its order; `use_appends`: those of event_tensors' run value and run
    length (capture/store/table_buffer.py BUFFER_RUNS), then of its per-row $slot and tensor_id.
    Both are checked against the record's EVENT_COLUMNS and USE_COLUMNS."""
    if not native.AVAILABLE or "native_record" not in context.fast_paths or \
            not (context.registry.native_scan or context.defer_statistics):
        return None
    registry = context.registry
    tables = context.writer.tables
    events, uses = tables["events"].columns, tables["event_tensors"]
    rows = registry.rows.columns
    frees = registry.frees.columns
    run_value, run_index = uses.runs
    use_columns = {run_value: uses.run_values.append, run_index: uses.run_lengths.append,
                   **{name: column.append for name, column in uses.columns.items()}}
    recorder = _native.OpRecorder(
        context=context, registry=registry,
        event_appends=_in_order(event_appends, {name: column.append for name, column in events.items()},
                                _native.EVENT_COLUMNS, "events"),
        use_appends=_in_order(use_appends, use_columns, _native.USE_COLUMNS, "event_tensors"),
        row_appends=tuple(rows[name].append for name in _native.ROW_COLUMNS),
        entries=registry.entries, refs=registry._refs, freed=None, kinds=registry._kinds,
        make_kind=registry.kind_of,
        parameter_names=registry.parameter_names, interned_args=arguments._interned_args,
        placeholders_json=arguments._placeholders_json, arg_slots=tuple(arguments._ARG_SLOTS),
        out_slot=arguments._OUT_SLOT, out_jsons=tuple(arguments._OUT_TENSOR), tensor_marker=arguments._TENSOR,
        out_item_slots=tuple(arguments.use_slot("out", i, None, None) for i in range(MAX_TENSORS)),
        out_list_json=arguments.out_list_json, out_list_jsons={},
        float_marker=arguments._FLOAT, ints_marker=arguments._INTS, bool_marker=arguments._BOOL,
        tensors_marker=arguments._TENSORS, list_slots=tuple(
            tuple(arguments.use_slot("arg", position, None, item) for item in range(MAX_LISTED))
            for position in range(len(arguments._ARG_SLOTS))),
        skipped=tensors._SKIPPED, calls=calls, wheres=wheres,
        tensor_type=torch.Tensor, parameter_type=torch.nn.Parameter, strided=torch.strided,
        bit_formats=dict(native.BIT_FORMATS), is_grad_enabled=torch.is_grad_enabled,
        graph_task_id=torch._C._current_graph_task_id, in_recomputation=recomputation.in_recomputation,
        dispatch_depth=torch._C._len_torch_dispatch_stack, thread_index=context.thread_index,
        scope_id=context.scope_id, storage_pointer=tensors.storage_pointer,
        level=_native.LEVELS.index(context.value_statistics),
        free_appends=tuple(frees[name].append for name in _native.FREE_COLUMNS),
        snapshot_memories=context.snapshot_memories, event_seqs=events["seq"], maybe_flush=context.writer.maybe_flush,
        flush_rows=context.writer.flush_rows, interned_kwargs=arguments._interned_kwargs,
        kwargs_json=arguments.kwargs_json, kwarg_types=tuple(arguments._TAGGED_TYPES),
        seq_counter=context.seq_counter, tensor_ids=registry.tensor_ids, uids=registry.uids,
        defer=bool(context.defer_statistics), pend_row=registry.pend_row,
    )
    # Every described tensor's weakref callback, the Python path's too: the same rows, in C.
    registry._freed = recorder.freed
    return recorder
