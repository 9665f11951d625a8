"""Collectives: one `collectives` row per communication op, with its kind, group and bytes.

DDP's allreduce, FSDP's allgather and reduce_scatter, and every `torch.distributed` call reach
the dispatch mode as c10d ops (`c10d.allreduce_.default`, ...) or functional collectives
(`_c10d_functional.all_reduce.default`, ...). Their process group is a TorchBind object that
the events row can only name (`$script_object`), so the facts an analysis needs are written
here as data: the kind, the group's name, size and backend, this rank's rank in it, the
reduction, the root, and the bytes going in and out on this rank.

The table below is data: op -> (kind, arguments read as input, arguments written as output);
`$out` is the op's return value. In-place kinds (allreduce, broadcast, reduce) name the same
arguments on both sides.

The values of a collective's tensors are not scanned (their statistics are left null): an
asynchronous collective is still writing them when the op returns.
"""

from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

_C10D = {
    "allreduce_": ("allreduce", ("tensors",), ("tensors",)),
    "allreduce_coalesced_": ("allreduce", ("tensors",), ("tensors",)),
    "broadcast_": ("broadcast", ("tensors",), ("tensors",)),
    "allgather_": ("allgather", ("input_tensors",), ("output_tensors",)),
    "_allgather_base_": ("allgather", ("input_tensor",), ("output_tensor",)),
    "allgather_coalesced_": ("allgather", ("input_list",), ("output_lists",)),
    "allgather_into_tensor_coalesced_": ("allgather", ("inputs",), ("outputs",)),
    "reduce_scatter_": ("reduce_scatter", ("input_tensors",), ("output_tensors",)),
    "_reduce_scatter_base_": ("reduce_scatter", ("input_tensor",), ("output_tensor",)),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", ("inputs",), ("outputs",)),
    "alltoall_": ("alltoall", ("input_tensors",), ("output_tensors",)),
    "alltoall_base_": ("alltoall", ("input",), ("output",)),
    "reduce_": ("reduce", ("tensors",), ("tensors",)),
    "gather_": ("gather", ("input_tensors",), ("output_tensors",)),
    "scatter_": ("scatter", ("input_tensors",), ("output_tensors",)),
    "barrier": ("barrier", (), ()),
    "monitored_barrier_": ("barrier", (), ()),
    "send": ("send", ("tensors",), ()),
    "recv_": ("recv", (), ("tensors",)),
    "recv_any_source_": ("recv", (), ("tensors",)),
}
_FUNCTIONAL = {
    "all_reduce": ("allreduce", ("input",), ("$out",)),
    "all_reduce_": ("allreduce", ("input",), ("input",)),
    "all_reduce_coalesced": ("allreduce", ("inputs",), ("$out",)),
    "all_reduce_coalesced_": ("allreduce", ("inputs",), ("inputs",)),
    "all_gather_into_tensor": ("allgather", ("input",), ("$out",)),
    "all_gather_into_tensor_out": ("allgather", ("input",), ("out",)),
    "all_gather_into_tensor_coalesced": ("allgather", ("inputs",), ("$out",)),
    "reduce_scatter_tensor": ("reduce_scatter", ("input",), ("$out",)),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", ("inputs",), ("$out",)),
    "all_to_all_single": ("alltoall", ("input",), ("$out",)),
    "broadcast": ("broadcast", ("input",), ("$out",)),
    "broadcast_": ("broadcast", ("input",), ("input",)),
}
# op name as the events table has it -> (kind, input arguments, output arguments)
COLLECTIVES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    **{f"c10d.{name}.default": rule for name, rule in _C10D.items()},
    **{f"_c10d_functional.{name}.default": rule for name, rule in _FUNCTIONAL.items()},
}
_ROOT_ARGUMENTS = ("root_rank", "src", "dst")


def _reduce_op_names() -> dict[int, str]:
    try:
        members = torch.distributed.ReduceOp.RedOpType.__members__.items()
        return {int(value): name for name, value in members}  # type: ignore[call-overload]  # pybind11 enum: no __int__ in its stub
    except (AttributeError, RuntimeError):  # torch built without distributed
        return {}


_REDUCE_OPS = _reduce_op_names()


def _bytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))


def _group(value):
    """The Python ProcessGroup behind a TorchBind object or a group name, or None."""
    import torch.distributed as dist

    if isinstance(value, torch.ScriptObject):
        return dist.ProcessGroup.unbox(value)
    if isinstance(value, str):
        return dist.distributed_c10d._resolve_process_group(value)  # type: ignore[arg-type]  # a name, typed as torch's GroupName
    return None


def _reduce_op(value) -> str | None:
    if isinstance(value, str):
        return value.upper()
    if isinstance(value, torch.ScriptObject):
        code = value.op()  # type: ignore[attr-defined]  # a TorchBind object's methods are not in its stub
        return _REDUCE_OPS.get(int(code), str(code))
    return None


_written: dict = {}


def collective_outputs(name: str, func) -> tuple[frozenset, frozenset]:
    """Positions and names of the arguments a collective writes (c10d's schemas do not mark
    them): described as new states, whose values are not scanned."""
    found = _written.get(func)
    if found is None:
        outputs = set(COLLECTIVES[name][2])
        arguments = [(i, a.name) for i, a in enumerate(func._schema.arguments) if a.name in outputs]
        found = _written[func] = (frozenset(i for i, _ in arguments), frozenset(n for _, n in arguments))
    return found


def collective_row(name: str, func, args, kwargs, out) -> dict | None:
    """The `collectives` row of an op (without seq), or None when the op is no collective."""
    rule = COLLECTIVES.get(name)
    if rule is None:
        return None
    kind, inputs, outputs = rule
    bound = dict(kwargs)
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args):
            bound[argument.name] = args[index]
        elif argument.name not in bound and argument.has_default_value():
            bound[argument.name] = argument.default_value
    bound["$out"] = out
    group = _group(bound.get("process_group", bound.get("group_name")))
    root = next((bound[a] for a in _ROOT_ARGUMENTS if isinstance(bound.get(a), int)), None)
    async_op = bound.get("async_op")
    return dict(
        kind=kind,
        group_name=None if group is None else group.group_name,
        group_size=None if group is None else group.size(),
        group_rank=None if group is None else group.rank(),
        backend=None if group is None else group.name(),
        reduce_op=_reduce_op(bound.get("reduce_op")),
        root=root,
        input_bytes=sum(_bytes(bound.get(a)) for a in inputs),
        output_bytes=sum(_bytes(bound.get(a)) for a in outputs),
        async_op=async_op if isinstance(async_op, bool) else None,
    )
