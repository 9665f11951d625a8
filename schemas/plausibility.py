"""Rules every row of a trace obeys, declared beside the schemas they constrain.

`validate` checks each committed part against them (analyze/trace/part_rows.py), so a value a
flipped bit or an edit made impossible is reported as one line naming the file, the column and
the row, instead of turning into a silently wrong count. A rule is a DuckDB boolean expression
over one row of its table; NULL passes (nullable columns are checked where they are set).

ORDERED columns grow along the rank's record order: within a part and from one committed part
to the next, every value is larger than the one before (`strict`) or not smaller.
"""

from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    table: str
    column: str  # the column a failure is reported under
    holds: str  # SQL, true for a plausible row
    meaning: str


# tensors.version of an inference tensor (torch.inference_mode keeps no version counter)
NO_VERSION_COUNTER = -1
# tensors.storage_ptr of a tensor with no storage: every non-strided layout (sparse COO, CSR,
# CSC, BSR, BSC), whose row also holds an empty stride
NO_STORAGE = -1


def _product(shape: str) -> str:
    return f"list_reduce(list_prepend(1::BIGINT, {shape}), lambda a, b: a * b)"


_NON_NEGATIVE = {
    "events": ["seq", "step", "scope_id", "thread"],
    "event_tensors": ["seq", "k", "tensor_id", "position", "item"],
    "tensors": ["tensor_id", "uid", "first_seq", "storage_offset", "numel", "nnz"],
    "tensor_frees": ["uid", "freed_seq"],
    "op_stats": ["seq"],
    "packed_inputs": ["seq", "tensor_id", "position"],
    "scopes": ["scope_id"],
    "modules": ["module_id", "parent_id"],
    "module_events": ["seq", "module_id", "call_index", "step", "stage_id"],
    "neuron_memories": ["seq", "module_id", "tensor_id"],
    "stage_markers": ["seq", "stage_id", "step", "b_index", "t_index"],
    "optimizer_steps": ["seq", "step", "optimizer_index", "call_index", "group_index", "param_index", "numel", "ndim"],
    "collectives": ["seq", "input_bytes", "output_bytes", "group_rank"],
}

RULES: list[Rule] = [
    Rule(table, column, f"{column} >= 0", "never negative")
    for table, columns in _NON_NEGATIVE.items() for column in columns
] + [
    Rule("tensors", "shape", "list_min(shape) >= 0 OR len(shape) = 0", "sizes are never negative"),
    Rule("tensors", "numel", f"numel = CASE WHEN nested_shapes IS NULL THEN {_product('shape')} "
         f"ELSE list_sum(list_transform(nested_shapes, lambda s: {_product('s')})) END",
         "numel is the product of the shape (a nested tensor's: the sum of its components')"),
    Rule("tensors", "nested_shapes", "shape[1] = len(nested_shapes)", "a nested tensor's shape counts its components"),
    Rule("tensors", "version", f"version >= {NO_VERSION_COUNTER}",
         f"never negative; {NO_VERSION_COUNTER} for an inference tensor (no version counter)"),
    Rule("tensors", "stride", f"len(stride) = len(shape) OR (len(stride) = 0 AND "
         f"(storage_ptr = {NO_STORAGE} OR nested_shapes IS NOT NULL))",
         f"one stride per dimension; none for a non-strided layout (sparse: storage_ptr {NO_STORAGE}) or a nested tensor"),
    Rule("tensors", "element_size", "element_size IN (1, 2, 4, 8, 16)", "bytes per element of a torch dtype"),
    Rule("tensors", "nnz", "nnz <= numel", "no more nonzeros than elements"),
    Rule("event_tensors", "role", "role IN ('arg', 'kwarg', 'out')", "arg, kwarg or out"),
    Rule("packed_inputs", "bits", f"octet_length(bits) = ({_product('shape')} + 7) // 8",
         "one bit per element of the shape"),
    Rule("module_events", "kind", "kind IN ('forward_pre', 'forward_post', 'backward_pre', 'backward_post')",
         "a module hook kind"),
    Rule("stage_markers", "kind", "kind IN ('begin', 'end')", "begin or end"),
    Rule("stage_markers", "phase", "phase IN ('forward', 'backward', 'optimizer')", "a phase"),
    Rule("events", "phase", "phase IN ('forward', 'backward', 'optimizer')", "a phase"),
    Rule("optimizer_steps", "numel", f"numel = {_product('shape')}", "numel is the product of the shape"),
    Rule("optimizer_steps", "ndim", "ndim = len(shape)", "ndim is the shape's length"),
    Rule("collectives", "group_size", "group_size >= 1", "a group has a member"),
    Rule("collectives", "group_rank", "group_rank < group_size", "a rank inside its group"),
]

# table -> (column, strictly increasing?) along the record order of a rank
ORDERED: dict[str, tuple[str, bool]] = {
    "events": ("seq", True),
    "module_events": ("seq", True),
    "stage_markers": ("seq", True),
}
