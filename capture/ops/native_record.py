"""The compiled per-op record (capture/native/_native_record.c), bound to one recording.

OpLog (capture/ops/dispatch.py) hands the common call to it and records the rest itself; both
write into the same buffers with the same registry, interning tables and counters, which
this module passes to it as they are (the Python path's own objects, so the two paths
interleave freely and write the same rows).
"""

from __future__ import annotations

import torch

from spiketrace.capture.ops import arguments
from spiketrace.capture import native
from spiketrace.capture.tensors import registry as tensors
from spiketrace.capture.modules import tracker
from spiketrace.capture.tensors.propagation import binary_cast, concatenated, negated, one_minus_binary, same_elements

# How the compiled record meets an op's propagation rule (capture/tensors/propagation.py): the enum
# of the same name in capture/native/_native_rules.h. It applies same_elements (views, expand,
# clone), binary_cast, negated, one_minus_binary, concatenated (cat, stack) and the
# arithmetic rules itself (x + 0, x - 0, x * 1, x / 1, a 0/1 x times 0, an all-zero operand
# of add or sub: capture/native/_native_rules.c); other rules run in Python, so a large output,
# whose scan costs more than the Python path, goes there, and so does one whose arithmetic
# rule reads what the C code does not (a 0/1 x times another number: its rounding in x's dtype).
(PROPAGATE_NONE, PROPAGATE_SAME, PROPAGATE_PYTHON, PROPAGATE_ADD, PROPAGATE_MUL, PROPAGATE_DIV,
 PROPAGATE_BINARY_CAST, PROPAGATE_NEGATE, PROPAGATE_SUB, PROPAGATE_ONE_MINUS, PROPAGATE_CONCAT) = range(11)
APPLIED_IN_C = {same_elements: PROPAGATE_SAME, binary_cast: PROPAGATE_BINARY_CAST, negated: PROPAGATE_NEGATE,
                one_minus_binary: PROPAGATE_ONE_MINUS, concatenated: PROPAGATE_CONCAT}
ARITHMETIC_HANDLING = {"aten.add.Tensor": PROPAGATE_ADD, "aten.sub.Tensor": PROPAGATE_SUB,
                       "aten.mul.Tensor": PROPAGATE_MUL, "aten.div.Tensor": PROPAGATE_DIV}


# Tensor list items the compiled record takes (its MAX_TENSORS, less the output and one spare).
MAX_LISTED = 30
MAX_TENSORS = MAX_LISTED + 2  # _native_record.h MAX_TENSORS: a tuple out has a slot for each item


def compiled_propagation(name: str, rule) -> int:
    """The compiled record's handling of op `name` whose propagation rule is `rule` (None: none)."""
    if rule is None:
        return PROPAGATE_NONE
    if rule in APPLIED_IN_C:
        return APPLIED_IN_C[rule]
    return ARITHMETIC_HANDLING.get(name, PROPAGATE_PYTHON)


def native_op_recorder(context, calls: dict, wheres: dict, event_appends, use_appends):
    """The compiled per-op record (capture/native/_native_record.c) bound to this recording's
    buffers, registry and interning tables, or None where it does not apply: no extension,
    the fast path `native_record` switched off, or a recording whose per-op work it does not
    do (statistics kept on the device, or taken by the Python scan). `calls` and `wheres`:
    OpLog's interning of call and $where tuples; `event_appends`: its bound appends of the
    events columns, in its order; `use_appends`: those of event_tensors' run value and run
    length (capture/store/table_buffer.py BUFFER_RUNS), then of its per-row $slot and tensor_id."""
    if not native.AVAILABLE or "native_record" not in context.fast_paths or context.defer_statistics \
            or not context.registry.native_scan:
        return None
    registry = context.registry
    events = context.writer.tables["events"].columns
    rows = registry.rows.columns
    frees = registry.frees.columns
    recorder = native._native.OpRecorder(
        context=context, registry=registry,
        event_appends=tuple(event_appends), use_appends=tuple(use_appends),
        row_appends=tuple(rows[name].append for name in tensors.ROW_COLUMNS),
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
        graph_task_id=torch._C._current_graph_task_id, in_recomputation=tracker.in_recomputation,
        dispatch_depth=torch._C._len_torch_dispatch_stack, thread_index=context.thread_index,
        scope_id=context.scope_id, storage_pointer=tensors.storage_pointer,
        level={"full": 2, "synaptic": 1, "none": 0}[context.value_statistics],
        free_appends=tuple(frees[name].append for name in ("uid", "freed_seq")),
        snapshot_memories=context.snapshot_memories, event_seqs=events["seq"], maybe_flush=context.writer.maybe_flush,
        flush_rows=context.writer.flush_rows, interned_kwargs=arguments._interned_kwargs,
        kwargs_json=arguments.kwargs_json, kwarg_types=tuple(arguments._TAGGED_TYPES),
        seq_counter=context.seq_counter, tensor_ids=registry.tensor_ids, uids=registry.uids,
    )
    # Every described tensor's weakref callback, the Python path's too: the same rows, in C.
    registry._freed = recorder.freed
    return recorder
