"""Which value statistics a capture takes, for which ops: a data table both phases share.

Capture reads these tables to decide what to compute; analysis reads them to know what a
trace can answer. Adding a statistic is a new row here plus its function in
capture/op_statistics.py; old traces simply lack the rows.

Per-tensor statistics (`nnz`, `is01` in the tensors table) are taken for every tensor state.
(Capture derives some outputs' statistics exactly from their inputs' instead of scanning
them, see capture/propagation.py; the values are the same.) Together nnz, is01, dtype, numel
and is_meta decide all six of SpikingJelly's binary predicates (spec section 0).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Operand:
    """Where an op's operand sits in the dispatched positional arguments."""

    name: str
    position: int


@dataclass(frozen=True)
class Statistic:
    doc: str
    # 'x_binary': taken when the first operand is binary; 'both_binary': when both are.
    condition: str
    consumers: tuple[str, ...]


STATISTICS: dict[str, Statistic] = {
    "conv_spike_taps": Statistic(
        "Sum over input positions p of S(p)*cov(p): S is the spike count map of x summed over batch and channels, "
        "cov the number of (output, kernel) taps that read p. Times C_out/groups it is SpikingJelly's AC/SynOp "
        "conv value and NMAC weight uses, for any stride, padding, dilation, groups and transposition.",
        "x_binary",
        ("ac", "synop", "neuromorphic_memory_access"),
    ),
    "conv_both_binary_sum": Statistic(
        "Double-precision sum of convolution(x, w) without bias: SpikingJelly's AC/SynOp value when x and w are both binary.",
        "both_binary",
        ("ac", "synop"),
    ),
    "mm_out_sum": Statistic(
        "out.sum(dtype=float64) of a binary x binary mm/bmm (SpikingJelly sums the actual output, rounding included).",
        "both_binary",
        ("ac", "synop"),
    ),
    "marginal_dot": Statistic(
        "Exact sum of x@y for binary x and y of addmm/baddbmm, as sum_b sum_k colsum_b(x)[k]*rowsum_b(y)[k] "
        "(SpikingJelly recomputes x@y in double without bias or alpha).",
        "both_binary",
        ("ac", "synop"),
    ),
}

# op -> (operands, statistics taken). Operands name the binary-tested inputs in order.
OP_STATISTICS: dict[str, tuple[tuple[Operand, ...], tuple[str, ...]]] = {
    "aten.convolution.default": (
        (Operand("x", 0), Operand("w", 1)),
        ("conv_spike_taps", "conv_both_binary_sum"),
    ),
    "aten.mm.default": ((Operand("x", 0), Operand("y", 1)), ("mm_out_sum",)),
    "aten.bmm.default": ((Operand("x", 0), Operand("y", 1)), ("mm_out_sum",)),
    "aten.addmm.default": ((Operand("x", 1), Operand("y", 2)), ("marginal_dot",)),
    "aten.baddbmm.default": ((Operand("x", 1), Operand("y", 2)), ("marginal_dot",)),
}

# Inputs kept bit-packed when the capture setting keep_binary_inputs is on (and they are binary).
SYNAPTIC_INPUTS: dict[str, tuple[int, ...]] = {
    op: tuple(operand.position for operand in operands) for op, (operands, _) in OP_STATISTICS.items()
}
