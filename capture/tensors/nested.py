"""The `tensors` row of a tensor whose sizes are not one int each: a nested tensor (torch.nested,
strided or jagged layout), or a tensor with a symbolic size.

A nested tensor is a list of components with no single shape: a strided one refuses `.shape`,
a jagged one (the NestedTensor subclass) gives its ragged dimension as a nested int (`j1`, a
SymInt) that no int64 column holds. Its row says what it is instead (schemas/tables.py, 1.4):
`shape` holds the component count, then each dimension's size where every component has it,
null where they differ (the ragged one); `nested_shapes` holds each component's shape (a meta
one's ragged sizes null: its lengths hold no values); `numel` is the components' total, the
elements an op on it really reads or writes; `stride` is empty (each component has its own).
Statistics come from the buffer behind the components when it holds exactly their elements
(nnz and 0/1-ness do not depend on their order), else they are null.

Any other size or stride that is not an int (a symbolic one) is null in its column: a row is
never written with a value its column cannot hold, which would fail the whole flush.
"""

from __future__ import annotations

from typing import NamedTuple, cast

import torch


class OddForm(NamedTuple):
    """The facts of a tensor whose sizes are not one int each, for its `tensors` row."""

    shape: tuple  # ints, None where there is no single int
    nested_shapes: tuple | None  # each component's shape (a nested tensor), else None
    stride: tuple
    storage_offset: int
    numel: int
    values: torch.Tensor | None  # a plain tensor holding exactly its elements, for statistics
    storage_of: torch.Tensor | None  # whose storage holds its elements (None: the tensor's own)


def ints(values) -> tuple:
    """`values` as a tuple of ints, None where one is not a plain int (a SymInt, a nested int)."""
    return tuple(v if type(v) is int else None for v in values)


def all_ints(values) -> bool:
    return all(type(v) is int for v in values)


def _common(component_shapes: list[tuple[int, ...]], ndim: int) -> tuple:
    """The nested tensor's shape: the component count, then each size every component shares."""
    sizes = [None if not component_shapes or len({s[d] for s in component_shapes}) != 1 else component_shapes[0][d]
             for d in range(ndim - 1)]
    return (len(component_shapes), *sizes)


def _jagged(t: torch.Tensor) -> OddForm:
    # torch.nested's NestedTensor keeps these as attributes (a plain Tensor's _values is a method)
    values, offsets = cast(torch.Tensor, t._values), cast(torch.Tensor, t._offsets)  # type: ignore[attr-defined]
    lengths = cast("torch.Tensor | None", t._lengths)  # type: ignore[attr-defined]
    ragged = t._ragged_idx - 1  # type: ignore[attr-defined]  # its dimension in values (no batch dim)
    # Reading the lengths from offsets anywhere but on the CPU is a copy to the host, a device
    # sync per tensor state, which capture never makes: there (and on meta, where offsets hold
    # no values) each component's ragged size is null; counts over them say they are unknown.
    # Without holes (no `lengths`) the values buffer's numel is still the components' total.
    known = offsets.device.type == "cpu" and (lengths is None or lengths.device.type == "cpu")
    if not known:
        counts: list = [None] * (offsets.numel() - 1)
    else:  # a nested tensor has few components
        starts = offsets.tolist()
        counts = lengths.tolist() if lengths is not None else [b - a for a, b in zip(starts, starts[1:])]
    inner = list(values.shape)
    components = tuple(tuple(inner[:ragged] + [n] + inner[ragged + 1:]) for n in counts)
    if known:
        numel = sum(_product(s) for s in components)
    else:
        numel = int(values.numel()) if lengths is None and not offsets.is_meta else int(t.numel())
    # values holds exactly the components' elements unless lengths leave holes between them
    exact = lengths is None and values.numel() == numel
    return OddForm(_common(list(components), t.dim()), components, (), 0, numel, values if exact else None, values)


def _strided(t: torch.Tensor) -> OddForm:
    sizes = t._nested_tensor_size()  # (components, dims): one row of sizes each
    components = tuple(tuple(s) for s in sizes.tolist()) if sizes.dim() == 2 else ()  # 1-d: none at all
    numel = int(t.numel())
    buffer = t.values()  # the flat buffer behind the components, in storage order
    exact = buffer.numel() == numel and buffer.dim() == 1
    return OddForm(_common(list(components), t.dim()), components, (), 0, numel, buffer if exact else None, None)


def _product(shape) -> int:
    product = 1
    for size in shape:
        product *= size
    return product


def odd_form(t: torch.Tensor, shape) -> OddForm:
    """The row facts of `t`, whose `shape` (None: it has none) is not all ints; called under
    excluded_from_modes() (its reads are ops no mode should see). Raises where they cannot be
    read: the op's record is then dropped and named in `degraded`."""
    if t.is_nested:
        return _jagged(t) if t.layout is torch.jagged else _strided(t)
    strided = t.layout is torch.strided
    return OddForm(ints(shape), None, ints(t.stride()) if strided else (),
                   int(t.storage_offset()) if strided else 0, int(t.numel()), None, None)


def sizes(t: torch.Tensor) -> tuple[tuple, int]:
    """`t`'s shape and element count as a row outside `tensors` writes them (a parameter's
    optimizer_steps row, the modules' lists of parameters and buffers): a nested tensor's shape
    as its `tensors` row has it (component count, null at the ragged dimension) and its
    components' total, a symbolic size null. Every such row takes them here, so no size that is
    not an int reaches a column or a JSON list (where a SymInt fails the whole flush, or the
    module's row). Called under excluded_from_modes(), as odd_form."""
    shape = None if t.is_nested else t.shape  # a strided nested tensor refuses `.shape`
    if shape is not None and all_ints(shape):
        return tuple(shape), int(t.numel())
    form = odd_form(t, shape)
    return form.shape, form.numel


def rows(t: torch.Tensor) -> torch.Tensor | None:
    """A plain tensor holding exactly a nested tensor's elements as (rows, features), where
    every component ends in the same features dimension (what a Linear over it multiplies),
    else None; called under excluded_from_modes(), as odd_form."""
    form = odd_form(t, None)
    last = {shape[-1] if shape else None for shape in form.nested_shapes or ()}
    features = last.pop() if len(last) == 1 else None
    if form.values is None or features is None:
        return None
    # a strided one's buffer is flat, in storage order: rows of its components only if they are packed
    if t.layout is torch.strided and not t.is_contiguous():
        return None
    return form.values.reshape(-1, features)
