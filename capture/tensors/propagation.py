"""Output statistics that follow exactly from the inputs' statistics: a table from op to rule.

Scanning a large activation is the dominant cost of capture. For these ops the output's
(nnz, is01) is implied by what is already known about the inputs, so the output is not
scanned. A rule receives the op's positional arguments, keyword arguments, the output and
`known(t)` (a tensor's (nnz, is01), or None when not known yet) and returns (nnz, is01),
or None to fall back to scanning. Every rule is exact, including NaN and -0.0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from spiketrace.capture.tensors.registry import excluded_from_modes, modes_would_see

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
    parts = [p for p in map(known, args[0]) if p is not None]
    if len(parts) != len(args[0]):
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


def negation_of(stats):
    """-x's (nnz, is01) from x's: the same nonzeros; all zeros stay 0/1, a 0/1 x with a one
    becomes 0/-1 (not 0/1); otherwise unknown (None): an x of 0s and -1s negates to 0/1."""
    if stats is None:
        return None
    nnz, is01 = stats
    if nnz == 0:
        return (0, True)
    return (nnz, False) if is01 else None


def negated(args, kwargs, out, known: Known):
    return negation_of(known(args[0]))


def _finite_number(value) -> bool:
    return type(value) in (int, float) and value - value == 0  # inf - inf and nan - nan are nan


# The scalar each arithmetic op leaves its tensor operand unchanged by: x + 0, x - 0, x * 1,
# x / 1 equal x exactly (NaN stays NaN, -0.0 + 0.0 = 0.0 is a zero either way) as long as the
# dtype does not change (no promotion, no rounding).
_IDENTITY_SCALARS = {"aten.add.Tensor": 0, "aten.sub.Tensor": 0, "aten.mul.Tensor": 1, "aten.div.Tensor": 1}


def _alpha(args, kwargs):
    return args[2] if len(args) > 2 else kwargs.get("alpha", 1)


_UNIT_PRODUCTS: dict[tuple, tuple] = {}


def _unit_product(dtype: torch.dtype, c) -> tuple:
    """(1 * c as a tensor of `dtype` computes it, the product's dtype): x * c's promotion and
    rounding, on the CPU, so a device tensor costs no sync (IEEE multiplication and rounding
    are the same there). Remembered per (dtype, type, value): the same few scalars recur."""
    key = (dtype, type(c), c)  # -0.0 meets 0.0 here: both give a zero, alike for the rule
    product = _UNIT_PRODUCTS.get(key)
    if product is None:
        if len(_UNIT_PRODUCTS) > 4096:
            _UNIT_PRODUCTS.clear()
        r = torch.ones((), dtype=dtype) * c
        product = _UNIT_PRODUCTS[key] = (r.item(), r.dtype)
    return product


def scalar_arithmetic(op: str):
    """x op c for a Python number c: the identity scalar keeps x's statistics; a multiplication
    of a 0/1 x by c gives 0 (0 * r is a zero while r is finite) and r = 1 * c as this dtype
    computes it, so nnz is x's unless r is zero, and it is 0/1 when r is 1."""
    identity = _IDENTITY_SCALARS[op]

    def rule(args, kwargs, out, known: Known):
        x, c = args[0], args[1]
        if not isinstance(x, torch.Tensor) or not _finite_number(c) or _alpha(args, kwargs) != 1 or \
                out.dtype != x.dtype or out.shape != x.shape:
            return None
        stats = known(x)
        if stats is None:
            return None
        if c == identity:
            return stats
        if op != "aten.mul.Tensor" or not stats[1]:
            return None
        r = _unit_product(x.dtype, c)
        if r[1] != out.dtype or r[0] - r[0] != 0:  # c overflowed the dtype: 0 * inf is nan
            return None
        return (0, True) if r[0] == 0 or stats[0] == 0 else (stats[0], r[0] == 1)

    return rule


def zero_operand(op: str):
    """a + b or a - b where one tensor operand is all zeros (nnz 0), alpha 1, and the other
    already has the output's shape and dtype (no broadcast, no promotion): a + 0 and a - 0
    are a exactly (see _IDENTITY_SCALARS), 0 + b is b, and 0 - b = -b (negation_of: b's zeros
    and nonzeros, also when an unsigned dtype wraps)."""
    negates = op == "aten.sub.Tensor"

    def rule(args, kwargs, out, known: Known):
        a, b = args[0], args[1]
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or _alpha(args, kwargs) != 1:
            return None
        a_stats, b_stats = known(a), known(b)
        if b_stats is not None and b_stats[0] == 0 and a.dtype == out.dtype and a.shape == out.shape:
            return a_stats
        if a_stats is not None and a_stats[0] == 0 and b.dtype == out.dtype and b.shape == out.shape \
                and b_stats is not None:
            return negation_of(b_stats) if negates else b_stats
        return None

    return rule


def arithmetic(op: str):
    """The rule of add, sub, mul or div: a Python number operand (scalar_arithmetic), or for add
    and sub an all-zero tensor operand (zero_operand)."""
    with_scalar = scalar_arithmetic(op)
    with_zeros = zero_operand(op) if op in ("aten.add.Tensor", "aten.sub.Tensor") else None

    def rule(args, kwargs, out, known: Known):
        if len(args) < 2 or not isinstance(out, torch.Tensor):
            return None
        if not isinstance(args[1], torch.Tensor):
            return with_scalar(args, kwargs, out, known)
        return None if with_zeros is None else with_zeros(args, kwargs, out, known)

    return rule


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
    **{op: arithmetic(op) for op in _IDENTITY_SCALARS},
}


def unseen(function, *arguments):
    """Run a part of the record whose ops no dispatch mode may see: under the exclusion guard
    only when a mode would see them (capture/tensors/registry.py modes_would_see)."""
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
