"""Accumulates (ACs), as SpikingJelly 2.0.0's ACCounter counts them: value-dependent.

A binary operand turns multiply-accumulates into accumulates, one per spike that reaches a
weight. The trace's per-tensor nnz/is01 and per-op activity scalars (spiketrace.schemas.statistics)
give every value exactly:
* conv, x binary: conv_spike_taps * C_out/groups (C_out/groups = w.shape[1] when transposed);
* conv, x and w binary: conv_both_binary_sum; mm/bmm both binary: mm_out_sum;
  addmm/baddbmm both binary: marginal_dot;
* one binary operand of a GEMM: nnz(binary) * the other's free dimension.
"""

from __future__ import annotations

from spiketrace.analyze.counters import conv_backward, device_ops, fused_attention, sj_neurons, undecomposed
from spiketrace.analyze.counters.sql import CUMSUM_ADDS, arg, kwarg, values_known


def _gemm(x: str, y: str, both: str, n_of_y: str, m_of_x: str, alpha_guard: bool) -> str:
    alpha = f" WHEN {kwarg('alpha', 1)} <> 1 THEN 0" if alpha_guard else ""
    return values_known(
        f"CASE WHEN {x}_is01 AND {y}_is01 THEN CAST(trunc({both}) AS BIGINT){alpha}"
        f" WHEN {x}_is01 THEN {x}_nnz * {n_of_y} WHEN {y}_is01 THEN {y}_nnz * {m_of_x} ELSE 0 END", x, y)


_TRANSPOSED = arg(6, "BOOLEAN")
_GROUPS = arg(8)
_CONV = values_known(
    "CASE WHEN a0_is01 AND a1_is01 THEN CAST(trunc(stat_conv_both_binary_sum) AS BIGINT)"
    f" WHEN a0_is01 THEN CAST(stat_conv_spike_taps AS BIGINT)"
    f" * CASE WHEN {_TRANSPOSED} THEN a1_shape[2] ELSE a1_shape[1] // {_GROUPS} END"
    f" WHEN a1_is01 THEN a1_nnz * CASE WHEN {_TRANSPOSED} THEN a0_shape[1] * prod(a0_shape[3:])"
    " ELSE o0_shape[1] * prod(o0_shape[3:]) END ELSE 0 END", "a0", "a1"
)

SYNAPTIC_RULES: dict[str, str] = {
    "aten.mm.default": _gemm("a0", "a1", "stat_mm_out_sum", "a1_shape[2]", "a0_shape[1]", False),
    "aten.bmm.default": _gemm("a0", "a1", "stat_mm_out_sum", "a1_shape[3]", "a0_shape[2]", False),
    "aten.addmm.default": _gemm("a1", "a2", "stat_marginal_dot", "a2_shape[2]", "a1_shape[1]", True),
    "aten.baddbmm.default": _gemm("a1", "a2", "stat_marginal_dot", "a2_shape[3]", "a1_shape[2]", True),
    "aten.convolution.default": _CONV,
}
# Composite ops recorded whole (analyze/counters/undecomposed.py), as their decomposition counts.
# conv{n}d is convolution's rule, not transposed; with only w binary, nnz(w) * N * prod(O), where
# N * prod(O) = numel(out) / C_out. linear(x, w) is mm(x, w.T) (or addmm, alpha 1): m = rows, n = out.
UNDECOMPOSED_SYNAPTIC_RULES: dict[str, str] = {
    **{op: values_known("CASE WHEN a0_is01 AND a1_is01 THEN CAST(trunc(stat_conv_both_binary_sum) AS BIGINT)"
                        f" WHEN a0_is01 THEN CAST(stat_conv_spike_taps AS BIGINT) * (a1_shape[1] // {undecomposed.CONV_GROUPS})"
                        f" WHEN a1_is01 THEN a1_nnz * {undecomposed.CONV_OUT_PER_CHANNEL} ELSE 0 END", "a0", "a1")
       for op in undecomposed.CONV_ND},
    undecomposed.LINEAR: _gemm("a0", "a1", "stat_linear_marginal_dot", undecomposed.LINEAR_OUT,
                               undecomposed.LINEAR_ROWS, False),
}

# Element-wise add/sub: two binary tensors cost nnz(x) + nnz(y) (post-op values for in-place
# ops, as recorded); anything else one accumulate per output element.
# (Only a tensor y makes the value depend on the operands' values.)
_ADD = ("CASE WHEN a1_present AND (a0_is01 IS NULL OR a1_is01 IS NULL) THEN NULL"
        " WHEN a0_is01 AND a1_present AND a1_is01 THEN a0_nnz + a1_nnz ELSE o0_numel END")
_BN_N, _BN_C = "a0_numel", "a0_shape[2]"


def _batch_norm(training: str) -> str:
    return (f"CASE WHEN {training} THEN ({_BN_N} - {_BN_C}) + {_BN_N} + {_BN_C} + {_BN_N}"
            f" + CASE WHEN a3_present THEN 2 * {_BN_C} ELSE 0 END ELSE {_BN_C} + {_BN_N} END")


RULES: dict[str, str] = {
    **SYNAPTIC_RULES,
    **{
        f"aten.{name}.{overload}": _ADD
        for name in ("add", "add_", "sub", "sub_")
        for overload in ("Tensor", "Scalar")
    },
    "aten.rsub.Tensor": _ADD,
    "aten.rsub.Scalar": _ADD,
    "aten.native_batch_norm.default": _batch_norm(arg(5, "BOOLEAN")),
    "aten.avg_pool2d.default": "(o0_numel * (prod(json_extract(args, '$[1]')::BIGINT[]) - 1))",
    "aten.sum.default": "(a0_numel - o0_numel)",
    "aten.sum.dim_IntList": "(a0_numel - o0_numel)",
    "aten.mean.dim": "(a0_numel - o0_numel)",
    "aten.sigmoid_.default": "o0_numel",
}
# Beyond SpikingJelly (docs/deviations.md): the optimizers' fused updates accumulate too:
# one add per element (addcmul/addcdiv) and a subtraction plus an add (lerp).
EXTRA_RULES: dict[str, str] = {
    **{f"aten.{name}.default": "o0_numel" for name in ("addcmul", "addcmul_", "addcdiv", "addcdiv_")},
    **{f"aten.{name}.{overload}": "(2 * o0_numel)" for name in ("lerp", "lerp_") for overload in ("Scalar", "Tensor")},
    # a running sum's adds, as sum's are counted (whatever the values)
    **{op: CUMSUM_ADDS for op in ("aten.cumsum.default", "aten.cumsum_.default")},
}
# Layer norm: batch norm's training rule with G per-row statistics for its C per-channel ones
# and no running statistics: (n - G) + n + G + n.
_LAYER_NORM = "(3 * a0_numel)"
EXTRA_RULES |= {
    "aten.native_layer_norm.default": _LAYER_NORM,
    **UNDECOMPOSED_SYNAPTIC_RULES,
    undecomposed.BATCH_NORM: RULES["aten.native_batch_norm.default"],
    undecomposed.LAYER_NORM: _LAYER_NORM,
    # attention's products as bmm counts them, and torch's fused transformer fast path as the
    # same layer's unfused ops (fused_attention.py)
    **fused_attention.AC,
    # a conv's backward: its gradients' products, its bias gradient's sum (conv_backward.py)
    conv_backward.OP: conv_backward.AC,
}
# What a GPU run dispatches instead (analyze/counters/device_ops.py): batch norm's other forms
# as native_batch_norm (backwards: no AC rule, as native_batch_norm_backward has none); fused
# optimizers as their unfused steps' adds; the multi-tensor adds, addcmul/addcdiv and lerp;
# SpikingJelly's fused neuron ops as their CPU decomposition's adds (sj_neurons).
EXTRA_RULES |= {op: rule for op, rule in {
    **{op: _batch_norm(training) for op, training in device_ops.BATCH_NORM_FORWARD.items()},
    **{op: rules[1] for op, rules in device_ops.FUSED_OPTIMIZERS.items()},
    **device_ops.FOREACH_AC,
    **sj_neurons.AC,
}.items() if op not in RULES}
RULES.update(EXTRA_RULES)
SPIKINGJELLY: dict[str, str | None] = {op: None for op in EXTRA_RULES}
SPIKINGJELLY_ABORTS: dict[str, str] = {}
