"""Arrow schemas of every table of a trace: the contract between capture and analyze.

Every field carries a one-line description in its metadata (key `doc`). `schemas/README.md`
documents the same tables and a test keeps the two equal. Evolve additively: add nullable
fields at the end of a table (and bump the minor version), never rename or retype one.

Ordering: every ordered record of a rank (an op, a module hook, a stage marker, a neuron
memory snapshot, an optimizer step) takes the next value of one shared counter, `seq`. So
"which module was running when op N ran" is a range query on seq.
"""

from __future__ import annotations

import pyarrow as pa


def field(name: str, type_: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"doc": doc})


def table(doc: str, *fields: pa.Field) -> pa.Schema:
    return pa.schema(list(fields), metadata={"doc": doc})


_str = pa.dictionary(pa.int32(), pa.string())
_ints = pa.list_(pa.int64())
_strs = pa.list_(pa.string())

EVENTS = table(
    "One row per dispatched aten op, in dispatch order.",
    field("seq", pa.int64(), "Position in the rank's shared record order.", False),
    field("op", _str, "Op name as torch.overrides.resolve_name gives it, e.g. aten.convolution.default.", False),
    field("step", pa.int32(), "Recorder step index (Recorder.step() advances it).", False),
    field("stage_id", pa.int32(), "Id of the enclosing stage instance (stage_markers.stage_id); null when unlabeled."),
    field("stage", _str, "Name of the enclosing stage, or 'unlabeled'.", False),
    field("phase", _str, "Phase of the enclosing stage (forward/backward/optimizer); null when unlabeled."),
    field("grad_enabled", pa.bool_(), "torch.is_grad_enabled() on the dispatching thread.", False),
    field("in_backward", pa.bool_(), "True while the autograd engine runs a graph task (backward).", False),
    field("thread", pa.int16(), "Small id of the dispatching thread (0 = the thread that opened the recorder).", False),
    field("scope_id", pa.int32(), "ActiveModuleTracker state at this op (scopes.scope_id).", False),
    field("args", pa.string(), "Positional non-tensor arguments as JSON; tensors are {\"$t\": k}, see event_tensors; a NaN or infinite float is {\"$float\": \"nan\"} (\"inf\", \"-inf\"), read as that double; a size that is no int (a jagged nested tensor's ragged size, a symbolic one) is {\"$symint\": \"j1\"} (its expression).", False),
    field("kwargs", pa.string(), "Keyword arguments as JSON, encoded like args.", False),
    field("out", pa.string(), "The op's return value as JSON, tensors as {\"$t\": k}.", False),
    field("recompute", pa.bool_(), "True for ops run while torch.utils.checkpoint recomputes a checkpointed forward during backward (reentrant or not); null in traces of schema 1.0."),
)

EVENT_TENSORS = table(
    "One row per tensor an op read or wrote (arguments, keyword arguments, outputs).",
    field("seq", pa.int64(), "The op (events.seq).", False),
    field("k", pa.int16(), "Index of this tensor within the op; the {\"$t\": k} placeholder in args/kwargs/out.", False),
    field("role", _str, "'arg', 'kwarg' or 'out'.", False),
    field("position", pa.int16(), "Positional index for args and outputs; null for kwargs."),
    field("name", _str, "Keyword name for kwargs; null otherwise."),
    field("item", pa.int16(), "Index inside a list/tuple argument or output; null for a bare tensor."),
    field("tensor_id", pa.int64(), "The described tensor state (tensors.tensor_id).", False),
)

TENSORS = table(
    "One row per tensor state: a tensor object at one version, described after the op that produced or used it.",
    field("tensor_id", pa.int64(), "Unique id of this (object, version) state.", False),
    field("uid", pa.int64(), "Per-object id, stable for the object's lifetime (see tensor_frees).", False),
    field("version", pa.int64(), "The tensor's _version counter when described (in-place ops bump it); -1 for an inference tensor (made under torch.inference_mode), which keeps no version counter.", False),
    field("first_seq", pa.int64(), "seq of the record that first described this state.", False),
    field("shape", _ints, "Sizes, one per dimension; null where a dimension has no single size: a nested tensor's ragged one (1.4, see nested_shapes; a symbolic size is null too).", False),
    field("stride", _ints, "Strides in elements, one per dimension; empty for a non-strided layout (sparse COO, CSR, CSC, BSR, BSC), whose row has storage_ptr -1, and for a nested tensor (1.4), whose components have their own.", False),
    field("storage_offset", pa.int64(), "Storage offset in elements; 0 for a non-strided layout and a nested tensor.", False),
    field("dtype", _str, "torch dtype name without the 'torch.' prefix, e.g. float32.", False),
    field("element_size", pa.int8(), "Bytes per element.", False),
    field("device", _str, "Device string, e.g. cpu or cuda:0.", False),
    field("requires_grad", pa.bool_(), "requires_grad when described.", False),
    field("numel", pa.int64(), "Number of elements; a nested tensor's: its components' total.", False),
    field("is_meta", pa.bool_(), "True for meta tensors (no values; statistics are null).", False),
    field("storage_ptr", pa.int64(), "data_ptr() of the untyped storage: with device and dtype, SpikingJelly's storage key; -1 for a tensor without one (every non-strided layout; a nested tensor's is the storage of the buffer holding its components).", False),
    field("is_parameter", pa.bool_(), "True when the object is a registered nn.Parameter of a recorded module.", False),
    field("parameter", _str, "Qualified parameter name (Root.path.weight) when is_parameter."),
    field("nnz", pa.int64(), "count_nonzero of the values; null when not taken (meta, statistics off)."),
    field("is01", pa.bool_(), "All values are exactly 0 or 1 (False if NaN); bool tensors are True; null when not taken."),
    field("nested_shapes", pa.list_(_ints), "A nested tensor's (torch.nested, strided or jagged layout) components' shapes, in order (a meta one's ragged sizes null: unknown); its shape is then [components, sizes all of them share, null where they differ]. Null for any other tensor, and in traces of schema 1.3 and older."),
)

TENSOR_FREES = table(
    "When a described tensor object was freed (its last Python reference died).",
    field("uid", pa.int64(), "tensors.uid of the freed object.", False),
    field("freed_seq", pa.int64(), "The next seq value at the time of the free: the object was alive for every record with seq < freed_seq.", False),
)

OP_STATS = table(
    "Per-op activity scalars named in spiketrace.schemas.statistics.OP_STATISTICS (long format: one row per op and statistic).",
    field("seq", pa.int64(), "The op (events.seq).", False),
    field("stat", _str, "Statistic name, a key of spiketrace.schemas.statistics.STATISTICS.", False),
    field("value", pa.float64(), "The value; integer-valued statistics are exact below 2**53.", False),
)

PACKED_INPUTS = table(
    "Bit-packed binary inputs of synaptic ops, kept when the capture setting keep_binary_inputs is on.",
    field("seq", pa.int64(), "The op (events.seq).", False),
    field("tensor_id", pa.int64(), "The packed tensor state (tensors.tensor_id).", False),
    field("position", pa.int16(), "Positional index of the packed operand in the op's arguments.", False),
    field("shape", _ints, "Logical shape of the packed tensor.", False),
    field("bits", pa.large_binary(), "Row-major values, 8 per byte, most significant bit first, zero-padded.", False),
)

SCOPES = table(
    "Distinct states of SpikingJelly's ActiveModuleTracker (parents and active modules), interned.",
    field("scope_id", pa.int32(), "Id referenced by events.scope_id.", False),
    field("parents", _strs, "tracker.parents (sorted): the scope names that receive an op's count, 'Global' included.", False),
    field("active_modules", pa.list_(pa.int32()), "tracker.active_modules as modules.module_id (sorted); can be stale after backward, as in SpikingJelly.", False),
)

MODULES = table(
    "One row per nn.Module the capture saw (the bound model's modules, and any other module called while recording).",
    field("module_id", pa.int32(), "Id referenced by other tables.", False),
    field("path", pa.string(), "Static qualified name Root.child.grandchild (Root = root class name) for modules of the bound model; the tracker name otherwise.", False),
    field("tracker_name", pa.string(), "The name ActiveModuleTracker first gave the module (it depends on call order)."),
    field("in_model", pa.bool_(), "True when the module belongs to the bound model.", False),
    field("parent_id", pa.int32(), "module_id of the parent in the bound model; null for the root and for outside modules."),
    field("class_name", pa.string(), "type(module).__qualname__.", False),
    field("class_module", pa.string(), "type(module).__module__.", False),
    field("mro", _strs, "Qualified names of the class MRO, most specific first (module.qualname).", False),
    field("attributes", pa.string(), "JSON object of the module's simple attributes (numbers, strings, bools, None, tuples of them, class names of callables like surrogate functions).", False),
    field("parameters", pa.string(), "JSON list of direct parameters: name, shape, dtype, requires_grad, numel.", False),
    field("buffers", pa.string(), "JSON list of direct buffers: name, shape, dtype, numel.", False),
    field("is_leaf", pa.bool_(), "True when the module has no children.", False),
)

MODULE_EVENTS = table(
    "Module hook events: forward pre/post (global module hooks) and backward pre/post (autograd grad hooks).",
    field("seq", pa.int64(), "Position in the record order.", False),
    field("kind", _str, "forward_pre, forward_post, backward_pre (grads of outputs ready) or backward_post (grads of inputs ready, or right after backward_pre when no input requires grad).", False),
    field("module_id", pa.int32(), "modules.module_id.", False),
    field("tracker_name", _str, "The tracker's name for the module at this moment.", False),
    field("call_index", pa.int32(), "How many times this module's forward had started before this call while the capture was in torch (recorded, warm-up and suspended steps; not the steps a schedule leaves alone); backward events carry the index of the forward call whose graph they differentiate.", False),
    field("step", pa.int32(), "Recorder step index.", False),
    field("stage_id", pa.int32(), "Enclosing stage instance, null when unlabeled."),
    field("stage", _str, "Enclosing stage name or 'unlabeled'.", False),
    field("phase", _str, "Enclosing stage phase; null when unlabeled."),
    field("grad_enabled", pa.bool_(), "torch.is_grad_enabled() at the hook.", False),
    field("training", pa.bool_(), "module.training at the hook.", False),
    field("thread", pa.int16(), "Small thread id.", False),
    field("inputs", pa.list_(pa.int64()), "tensor_id of each positional input tensor (forward) or input gradient (backward_post; null entries for None)."),
    field("outputs", pa.list_(pa.int64()), "tensor_id of each output tensor (forward_post) or output gradient (backward_pre)."),
    field("kwarg_inputs", pa.list_(pa.int64()), "tensor_id of keyword tensor inputs (forward_post only)."),
    field("inputs_require_grad", pa.bool_(), "Whether any positional input required grad at the forward call."),
    field("recompute", pa.bool_(), "True for the forward events of a module whose forward runs again during backward (activation checkpointing recomputes it); null in traces of schema 1.0."),
)

NEURON_MEMORIES = table(
    "Snapshots of a stateful neuron's memories (SpikingJelly MemoryModule._memories), written whenever they change between records and at every forward_post.",
    field("seq", pa.int64(), "The record this snapshot holds for (valid until the next snapshot of the same module).", False),
    field("module_id", pa.int32(), "modules.module_id.", False),
    field("name", _str, "Memory name, e.g. v.", False),
    field("kind", _str, "'tensor', 'float', 'none' or 'other'.", False),
    field("tensor_id", pa.int64(), "tensors.tensor_id when kind is tensor."),
    field("value", pa.float64(), "The number when kind is float."),
)

STAGE_MARKERS = table(
    "Begin and end of every stage instance, with SpikingJelly 2.0.0 NeuroMC stage options.",
    field("seq", pa.int64(), "Position in the record order.", False),
    field("kind", _str, "'begin' or 'end'.", False),
    field("stage_id", pa.int32(), "Stage instance id.", False),
    field("name", _str, "Stage name.", False),
    field("phase", _str, "forward, backward or optimizer.", False),
    field("phase_source", _str, "'explicit' or 'inferred' (from the name, as the seed profiler does).", False),
    field("reuse_weights", pa.bool_(), "NeuroMC reuse_weights (t_type = int(reuse_weights)).", False),
    field("batch_norm_backward", pa.bool_(), "NeuroMC batch_norm_backward (conv_type '--' vs 'without_bp_bn').", False),
    field("b_index", pa.int32(), "N of a legacy 'b<N>' token in the name, else null."),
    field("t_index", pa.int32(), "N of a legacy 't<N>' token in the name, else null."),
    field("step", pa.int32(), "Recorder step index.", False),
)

OPTIMIZER_STEPS = table(
    "One row per parameter per optimizer.step() call, taken from register_step_pre_hook (before the update).",
    field("seq", pa.int64(), "Position in the record order (all rows of one call share it).", False),
    field("step", pa.int32(), "Recorder step index.", False),
    field("optimizer_index", pa.int32(), "Which recorded optimizer (0 = the first bound).", False),
    field("call_index", pa.int32(), "How many step() calls this optimizer had before this one.", False),
    field("optimizer_class", _str, "type(optimizer).__qualname__.", False),
    field("group_index", pa.int32(), "Index of the param group.", False),
    field("hyperparameters", _str, "JSON of the group's options (everything but params).", False),
    field("param_index", pa.int32(), "Index of the parameter inside its group.", False),
    field("parameter", _str, "Qualified parameter name if it belongs to a recorded module, else null."),
    field("module_id", pa.int32(), "Owning module (modules.module_id), null if unknown."),
    field("shape", _ints, "Parameter shape.", False),
    field("ndim", pa.int16(), "Parameter ndim.", False),
    field("numel", pa.int64(), "Parameter numel.", False),
    field("dtype", _str, "Parameter dtype.", False),
    field("has_grad", pa.bool_(), "p.grad is not None.", False),
    field("state_keys", _strs, "Sorted keys of optimizer.state[p] (momentum_buffer, exp_avg, step...).", False),
)

COLLECTIVES = table(
    "One row per collective communication op (c10d and functional collectives: DDP's allreduce, FSDP's allgather and reduce_scatter, broadcast, ...), beside its events row.",
    field("seq", pa.int64(), "The op (events.seq).", False),
    field("kind", _str, "allreduce, allgather, reduce_scatter, broadcast, alltoall, reduce, gather, scatter, barrier, send or recv.", False),
    field("group_name", pa.string(), "The process group's name (torch.distributed group_name), null when unknown."),
    field("group_size", pa.int32(), "Ranks in the process group, null when unknown."),
    field("group_rank", pa.int32(), "This rank's rank inside the group, null when unknown."),
    field("backend", _str, "The group's backend (gloo, nccl, ...), null when unknown."),
    field("reduce_op", _str, "Reduction for reducing kinds (SUM, AVG, MAX, ...), else null."),
    field("root", pa.int32(), "Root rank (broadcast, reduce, gather, scatter), destination (send) or source (recv), else null."),
    field("input_bytes", pa.int64(), "Bytes of the tensors this rank sends into the collective (in-place kinds: the tensors it reduces or broadcasts).", False),
    field("output_bytes", pa.int64(), "Bytes of the tensors the collective writes on this rank.", False),
    field("async_op", pa.bool_(), "The op's async_op argument, null when it has none."),
)

TABLES: dict[str, pa.Schema] = {
    "events": EVENTS,
    "event_tensors": EVENT_TENSORS,
    "tensors": TENSORS,
    "tensor_frees": TENSOR_FREES,
    "op_stats": OP_STATS,
    "packed_inputs": PACKED_INPUTS,
    "scopes": SCOPES,
    "modules": MODULES,
    "module_events": MODULE_EVENTS,
    "neuron_memories": NEURON_MEMORIES,
    "stage_markers": STAGE_MARKERS,
    "optimizer_steps": OPTIMIZER_STEPS,
    "collectives": COLLECTIVES,
}


def field_doc(schema_field: pa.Field) -> str:
    return (schema_field.metadata or {}).get(b"doc", b"").decode()


def table_doc(schema: pa.Schema) -> str:
    return (schema.metadata or {}).get(b"doc", b"").decode()
