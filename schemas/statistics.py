"""Which value statistics a capture takes, for which ops: a data table both phases share.

Capture reads these tables to decide what to compute; analysis reads them to know what a
trace can answer. Adding a statistic is a new row here plus its function in
capture/ops/op_statistics.py; old traces simply lack the rows.

Per-tensor statistics (`nnz`, `is01` in the tensors table) are taken for every tensor state.
(Capture derives some outputs' statistics exactly from their inputs' instead of scanning
them, see capture/tensors/propagation.py; the values are the same.) Together nnz, is01, dtype, numel
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
    # 'x_binary': taken when the first operand is binary; 'both_binary': when both are;
    # 'forward': taken for every call outside backward, whatever the operands' values.
    condition: str
    consumers: tuple[str, ...]
    # The schema version whose captures first take it: an older trace has none of its rows.
    added_in: str = "1.0"


CONDITIONS = ("x_binary", "both_binary", "forward")
# Statistics of the NeuroBench convention (analyze/counters/neurobench/convention.py), first taken in 1.3.
NEUROBENCH_ADDED_IN = "1.3"


STATISTICS: dict[str, Statistic] = {
    "conv_spike_taps": Statistic(
        "Sum over input positions p of S(p)*cov(p): S is the spike count map of x summed over batch and channels, "
        "cov the number of (output, kernel) taps that read p. Times C_out/groups it is SpikingJelly's AC/SynOp "
        "conv value and NMAC weight uses, for any stride, padding, dilation, groups and transposition. "
        "From schema 1.5 also of convolution_backward's x (its weight gradient's accumulates over spikes).",
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
    "linear_marginal_dot": Statistic(
        "Exact sum of x@w.T for binary x and w of an undecomposed aten.linear (x of any leading dims), as "
        "sum_k colsum(x)[k]*colsum(w)[k]: the value marginal_dot or mm_out_sum gives its decomposed addmm/mm.",
        "both_binary",
        ("ac", "synop"),
        "1.3",
    ),
    # NeuroBench's SynapticOperations (analyze/counters/neurobench/convention.py): the pairs of a nonzero input
    # and a nonzero weight that meet inside the output, and whether the input is spikes in {-1, 0, 1}.
    "conv_nonzero_pairs": Statistic(
        "sum(conv(x != 0, w != 0)) without bias, same geometry: the (nonzero input, nonzero weight) pairs that meet "
        "inside the output (NeuroBench's effective synaptic operations of a conv call). Weight part per weight version.",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
    "mm_nonzero_pairs": Statistic(
        "sum_b sum_k nnz(x[b, :, k]) * nnz(y[b, k, :]) of mm/bmm(x, y): the (nonzero, nonzero) pairs of the product "
        "(NeuroBench's effective synaptic operations of a Linear's GEMM).",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
    "addmm_nonzero_pairs": Statistic(
        "mm_nonzero_pairs of the x and y of addmm/baddbmm(bias, x, y); the bias is no synaptic operation.",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
    "linear_nonzero_pairs": Statistic(
        "sum_k nnz(x[..., k]) * nnz(w[:, k]) of an undecomposed aten.linear(x, w[, bias]): mm_nonzero_pairs of x@w.T.",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
    "x_ternary": Statistic(
        "1 when every value of the input x (args[0] of convolution, conv1d/2d/3d, mm, bmm, linear) is -1, 0 or 1, "
        "else 0: NeuroBench counts such a layer's operations as accumulates (spikes), any other as MACs.",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
    "addmm_x_ternary": Statistic(
        "x_ternary of the x of addmm/baddbmm(bias, x, y) (args[1]).",
        "forward",
        ("neurobench",),
        NEUROBENCH_ADDED_IN,
    ),
}

_CONV = ("conv_spike_taps", "conv_both_binary_sum", "conv_nonzero_pairs", "x_ternary")
_X_W = (Operand("x", 0), Operand("w", 1))

# op -> (operands, statistics taken). Operands name the binary-tested inputs in order.
OP_STATISTICS: dict[str, tuple[tuple[Operand, ...], tuple[str, ...]]] = {
    "aten.convolution.default": (_X_W, _CONV),
    "aten.mm.default": ((Operand("x", 0), Operand("y", 1)), ("mm_out_sum", "mm_nonzero_pairs", "x_ternary")),
    "aten.bmm.default": ((Operand("x", 0), Operand("y", 1)), ("mm_out_sum", "mm_nonzero_pairs", "x_ternary")),
    "aten.addmm.default": ((Operand("x", 1), Operand("y", 2)), ("marginal_dot", "addmm_nonzero_pairs", "addmm_x_ternary")),
    "aten.baddbmm.default": ((Operand("x", 1), Operand("y", 2)), ("marginal_dot", "addmm_nonzero_pairs", "addmm_x_ternary")),
    # Undecomposed forms some backends dispatch (capture decomposes them while recording, so
    # they are rare in traces): the statistics of the ops they decompose into.
    **{f"aten.conv{n}d.{overload}": (_X_W, _CONV) for n in (1, 2, 3) for overload in ("default", "padding")},
    "aten.linear.default": (_X_W, ("linear_marginal_dot", "linear_nonzero_pairs", "x_ternary")),
}
# A conv's backward (grad_out, x, w, ...): its weight gradient multiplies x by grad_out, so over
# spikes it accumulates what the forward did, conv_spike_taps of the same x and geometry
# (analyze/counters/conv_backward.py). Taken from schema 1.5; an older trace has no such row.
BACKWARD_STATISTICS: dict[str, tuple[tuple[Operand, ...], tuple[str, ...]]] = {
    "aten.convolution_backward.default": ((Operand("x", 1), Operand("w", 2)), ("conv_spike_taps",)),
}
OP_STATISTICS.update(BACKWARD_STATISTICS)

# Inputs kept bit-packed when the capture setting keep_binary_inputs is on (and they are binary):
# the forward synaptic ops' (a backward reads the inputs its forward packed).
SYNAPTIC_INPUTS: dict[str, tuple[int, ...]] = {
    op: tuple(operand.position for operand in operands) for op, (operands, _) in OP_STATISTICS.items()
    if op not in BACKWARD_STATISTICS
}
