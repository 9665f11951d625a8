"""Output statistics that follow exactly from the inputs' statistics: a table from op to rule.

Scanning a large activation is the dominant cost of capture. For these ops the output's
(nnz, is01) is implied by what is already known about the inputs, so the output is not
scanned. A rule receives the op's positional arguments, keyword arguments, the output and
`known(t)` (a tensor's (nnz, is01), or None when not known yet) and returns (nnz, is01),
or None to fall back to scanning. Every rule is exact, including NaN and -0.0.
"""

from __future__ import annotations

from typing import Callable

import torch

from capture.tensors import excluded_from_modes, modes_would_see

Known = Callable[[torch.Tensor], "tuple[int, bool] | None"]


def _elements(base: tuple[int, bool], base_numel: int, numel: int) -> tuple[int, bool] | None:
    # A view holds the base's elements; expand repeats each of them numel/base_numel times.
    if base_numel == 0:
        return (0, True) if numel == 0 else None
    return base[0] * (numel // base_numel), base[1]


def same_elements(args, kwargs, out, known: Known):
    base = known(args[0])
    return None if base is None else _elements(base, args[0].numel(), out.numel())


def concatenated(args, kwargs, out, known: Known):
    parts = [known(t) for t in args[0]]
    if any(p is None for p in parts):
        return None
    return sum(p[0] for p in parts), all(p[1] for p in parts)


def one_minus_binary(args, kwargs, out, known: Known):
    # rsub(x, 1) = 1 - x: for binary x, binary again with the zeros and ones swapped.
    x, other = args[0], args[1]
    alpha = args[2] if len(args) > 2 else kwargs.get("alpha", 1)
    stats = known(x)
    if stats is None or not stats[1] or other != 1 or alpha != 1 or x.shape != out.shape:
        return None
    return out.numel() - stats[0], True


def binary_cast(args, kwargs, out, known: Known):
    # A cast keeps 0 and 1 as 0 and 1 in every dtype; other values may round to zero.
    stats = known(args[0])
    return stats if stats is not None and stats[1] else None


def negated(args, kwargs, out, known: Known):
    stats = known(args[0])
    return None if stats is None else (stats[0], stats[0] == 0)


PROPAGATION: dict[str, Callable] = {
    **{
        op: same_elements
        for op in (
            "aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default",
            "aten.detach.default", "aten.lift_fresh.default", "aten.t.default", "aten.transpose.int",
            "aten.permute.default", "aten.unsqueeze.default", "aten.squeeze.default", "aten.squeeze.dim",
            "aten.squeeze.dims", "aten.expand.default", "aten.flatten.using_ints", "aten.contiguous.default",
            "aten.clone.default",
        )
    },
    "aten.stack.default": concatenated,
    "aten.cat.default": concatenated,
    "aten.rsub.Scalar": one_minus_binary,
    "aten._to_copy.default": binary_cast,
    "aten.neg.default": negated,
}


def unseen(function, *arguments):
    """Run a part of the record whose ops no dispatch mode may see: under the exclusion guard
    only when a mode would see them (capture/tensors.py modes_would_see)."""
    if modes_would_see():
        with excluded_from_modes():
            return function(*arguments)
    return function(*arguments)


def propagated(propagate, args, kwargs, out, known):
    """A propagation rule's (nnz, is01), or None (scan instead) if the rule cannot apply."""
    try:
        return unseen(propagate, args, kwargs, out, known)  # a rule may compare a tensor with a number
    except Exception:  # noqa: BLE001 - scanning gives the same values: nothing is lost
        return None
