"""FLOPs, as SpikingJelly 2.0.0's FlopCounter counts them: shapes and arguments only.

Each rule is a SQL expression over an op_facts row (see analyze/counters/sql.py). Two
differences from SpikingJelly, fixed by default (docs/deviations.md):
* `add.Scalar`/`sub.Scalar` carry alpha positionally (args[2]); SpikingJelly reads alpha
  from kwargs only and so ignores it. `compat="spikingjelly"` ignores it too.
* `native_batch_norm_backward` without affine parameters (gamma None) crashes SpikingJelly;
  we use the channel count. Under compat the op is reported as one SpikingJelly cannot count.
"""

from __future__ import annotations

from spiketrace.analyze.counters import activations, device_ops, fused_attention, sj_neurons, undecomposed
from spiketrace.analyze.counters.sql import CUMSUM_ADDS, SELECTIONS, arg, arg_is_null, arg_item, arg_list, kwarg

ZERO = "0"


def _conv(x: str, w: str, out: str, transposed: str, bias_numel: str = "0") -> str:
    # 2 * C_in/g * prod(K) * prod(spatial) * C_out * N (+ numel(out) with bias); spatial from x
    # when transposed, else from out. Grouping is implicit in w's shape.
    spatial = f"CASE WHEN {transposed} THEN prod({x}_shape[3:]) ELSE prod({out}_shape[3:]) END"
    return f"(2 * {w}_shape[2] * prod({w}_shape[3:]) * {spatial} * {w}_shape[1] * {x}_shape[1] + {bias_numel})"


def _alpha_add(alpha: str) -> str:
    return f"(CASE WHEN {alpha} = 1 THEN o0_numel ELSE coalesce(a1_numel, 1) + o0_numel END)"


def _gemm_bias(alpha: str, beta: str, mn: str) -> str:
    return (
        f"(CASE WHEN {alpha} <> 1 THEN {mn} ELSE 0 END + CASE WHEN {beta} = 1 THEN {mn} "
        f"WHEN {beta} <> 0 THEN a0_numel + {mn} ELSE 0 END)"
    )


_MM = "(2 * a0_shape[1] * a1_shape[2] * a0_shape[2])"
_ADDMM_MN = "(a1_shape[1] * a2_shape[2])"
_BMM = "(2 * a0_shape[1] * a0_shape[2] * a1_shape[3] * a0_shape[3])"
_BADDBMM_MN = "(a1_shape[1] * a1_shape[2] * a2_shape[3])"
_TRANSPOSED = arg(7, "BOOLEAN")

# convolution_backward(grad_out a0, x a1, w a2, bias_sizes, stride, padding, dilation,
#                      transposed, output_padding, groups, output_mask) -> (grad_x, grad_w, grad_b)
_GRAD_INPUT = (
    f"(2 * a2_shape[2] * prod(a2_shape[3:]) * CASE WHEN NOT {_TRANSPOSED} THEN prod(a0_shape[3:]) "
    f"ELSE prod(o0_shape[3:]) END * a2_shape[1] * a0_shape[1])"
)
# Weight grad: a conv of pseudo_x = (grad_out if transposed else x).T(0,1) with
# pseudo_w = (x if transposed else grad_out).T(0,1); the transposes swap dims 0 and 1.
# Each shape read picks its operand itself (rather than indexing a picked list), so that it
# stays one of the forms analyze/counters/facts.py serves as integer columns.


def _pseudo_x(read: str) -> str:
    return f"(CASE WHEN {_TRANSPOSED} THEN {read.format('a0')} ELSE {read.format('a1')} END)"


def _pseudo_w(read: str) -> str:
    return f"(CASE WHEN {_TRANSPOSED} THEN {read.format('a1')} ELSE {read.format('a0')} END)"


_GRAD_WEIGHT = (
    f"(2 * {_pseudo_w('{}_shape[1]')} * {_pseudo_w('prod({}_shape[3:])')} * prod(o1_shape[3:])"
    f" * {_pseudo_w('{}_shape[2]')} * {_pseudo_x('{}_shape[2]')})"
)
_GRAD_BIAS = "(a0_shape[2] * (a0_shape[1] * prod(a0_shape[3:]) - 1))"
_CONV_BACKWARD = (
    f"(CASE WHEN {arg_item(10, 0)} THEN {_GRAD_INPUT} ELSE 0 END"
    f" + CASE WHEN {arg_item(10, 1)} THEN {_GRAD_WEIGHT} ELSE 0 END"
    f" + CASE WHEN {arg_item(10, 2)} AND NOT {arg_is_null(3)} THEN {_GRAD_BIAS} ELSE 0 END)"
)

_BN_N, _BN_C = "a0_numel", "a0_shape[2]"


def _batch_norm(training: str) -> str:
    return (
        f"(CASE WHEN {training} THEN {_BN_N} + 2 * {_BN_N} + 2 * {_BN_C} + 2 * {_BN_C} + 2 * {_BN_N}"
        f" + CASE WHEN a1_present THEN 2 * {_BN_N} ELSE 0 END + CASE WHEN a3_present THEN 6 * {_BN_C} ELSE 0 END"
        f" ELSE 2 * {_BN_C} + 2 * {_BN_N} + CASE WHEN a1_present THEN 2 * {_BN_N} ELSE 0 END END)"
    )


_BATCH_NORM = _batch_norm(arg(5, "BOOLEAN"))


def _batch_norm_backward(c: str, n: str = "a0_numel", train: str = arg(7, "BOOLEAN"),
                         masks: tuple[str, str, str] = (arg_item(9, 0), arg_item(9, 1), arg_item(9, 2))) -> str:
    # native_batch_norm_backward(grad_out a0, x a1, gamma a2, rm, rv, save_mean, save_invstd,
    #                            train [7], eps, output_mask [9])
    m0, m1, m2 = masks
    return (
        f"(CASE WHEN {train} THEN"
        f" CASE WHEN {m0} THEN 2 * {n} + ({n} - {c}) + (2 * {n} - {c}) + (5 * {n} + 2 * {c}) ELSE 0 END"
        f" + CASE WHEN {m1} AND NOT {m0} THEN 2 * {n} + 2 * {n} - {c} ELSE 0 END"
        f" + CASE WHEN {m2} AND NOT {m0} THEN {n} - {c} ELSE 0 END"
        f" ELSE CASE WHEN {m0} THEN 2 * {n} ELSE 0 END + CASE WHEN {m1} THEN 4 * {n} - {c} ELSE 0 END"
        f" + CASE WHEN {m2} THEN {n} - {c} ELSE 0 END END)"
    )


_SDPA = "(2 * a0_shape[1] * a0_shape[2] * a0_shape[3] * a1_shape[3] * (a0_shape[4] + a2_shape[4]))"
_SDPA_BACKWARD = "(2 * a1_shape[1] * a1_shape[2] * a1_shape[3] * a2_shape[3] * (3 * a1_shape[4] + 2 * a3_shape[4]))"
_SDPA_OPS = undecomposed.SDPA_KERNELS

ALPHA_KWARG = kwarg("alpha", 1)
# Scalar add/sub: alpha is positional (args[2]) when given.
ALPHA_POSITIONAL = f"coalesce({arg(2, 'DOUBLE')}, {ALPHA_KWARG})"

_ELEMENTWISE = [
    f"aten.{name}.{overload}"
    for name in ("mul", "mul_", "div", "div_")
    for overload in ("Tensor", "Scalar")
] + [
    f"aten.{name}.{overload}" for name in ("eq", "ne", "lt", "le", "gt", "ge") for overload in ("Tensor", "Scalar")
] + ["aten.neg.default", "aten.neg_.default"] + [
    f"aten.logical_{name}.default" for name in ("and", "or", "xor", "not")
]

RULES: dict[str, str] = {
    "aten.mm.default": _MM,
    "aten.addmm.default": f"(2 * {_ADDMM_MN} * a1_shape[2] + {_gemm_bias(kwarg('alpha', 1), kwarg('beta', 1), _ADDMM_MN)})",
    "aten.bmm.default": _BMM,
    "aten.baddbmm.default": (
        f"(2 * {_BADDBMM_MN} * a1_shape[3] + {_gemm_bias(kwarg('alpha', 1), kwarg('beta', 1), _BADDBMM_MN)})"
    ),
    "aten.convolution.default": _conv("a0", "a1", "o0", arg(6, "BOOLEAN"), "CASE WHEN a2_present THEN o0_numel ELSE 0 END"),
    "aten.convolution_backward.default": _CONV_BACKWARD,
    "aten.native_batch_norm.default": _BATCH_NORM,
    "aten.native_batch_norm_backward.default": _batch_norm_backward("coalesce(a2_numel, a1_shape[2])"),
    "aten.max_pool2d_with_indices.default": f"(o0_numel * (prod({arg_list(1)}) - 1))",
    "aten.avg_pool2d.default": f"(o0_numel * prod({arg_list(1)}))",
    "aten.sum.default": "(a0_numel - o0_numel)",
    "aten.sum.dim_IntList": "(a0_numel - o0_numel)",
    "aten.mean.dim": "a0_numel",
    **{f"aten.{name}.Tensor": _alpha_add(ALPHA_KWARG) for name in ("add", "add_", "sub", "sub_", "rsub")},
    **{f"aten.{name}.Scalar": _alpha_add(ALPHA_POSITIONAL) for name in ("add", "add_", "sub", "sub_", "rsub")},
    **{op: "o0_numel" for op in _ELEMENTWISE},
    "aten.sigmoid.default": "(4 * o0_numel)",
    "aten.sigmoid_.default": "(4 * o0_numel)",
    **{f"aten._scaled_dot_product_{name}.default": _SDPA for name in _SDPA_OPS},
    **{f"aten._scaled_dot_product_{name}_backward.default": _SDPA_BACKWARD for name in _SDPA_OPS},
    **{
        op: ZERO
        for op in (
            "aten.max_pool2d_with_indices_backward.default", "aten.stack.default", "aten.clone.default",
            "aten._to_copy.default", "aten.full_like.default", "aten.ones_like.default", "aten.view.default",
            "aten.unsqueeze.default", "aten.squeeze.dim", "aten.unbind.int", "aten.empty.memory_format",
            "aten.select.int", "aten.select_backward.default", "aten.detach.default", "aten.t.default",
            "aten.expand.default",
        )
    },
}

# Beyond SpikingJelly (it has no rule for these, so its optimizer and loss FLOPs are short;
# docs/deviations.md): the ops Adam/AdamW, SGD with weight decay and the common losses run.
_VALUE_SCALE = f"CASE WHEN {kwarg('value', 1)} <> 1 THEN o0_numel ELSE 0 END"
EXTRA_RULES: dict[str, str] = {
    # self + value * t1 (*|/) t2: the product or quotient, the add, and the scale when value != 1
    **{f"aten.{name}.default": f"(2 * o0_numel + {_VALUE_SCALE})" for name in ("addcmul", "addcmul_", "addcdiv", "addcdiv_")},
    # start + weight * (end - start): a subtraction, a product and an add per element
    **{f"aten.{name}.{overload}": "(3 * o0_numel)" for name in ("lerp", "lerp_") for overload in ("Scalar", "Tensor")},
    # one elementwise function evaluation per output element
    **{f"aten.{name}.default": "o0_numel"
       for name in ("sqrt", "sqrt_", "rsqrt", "rsqrt_", "reciprocal", "reciprocal_", "exp", "exp_", "log", "log_")},
    # (x - y)^2 per element, then the reduction's adds (none for reduction='none')
    "aten.mse_loss.default": "(2 * a0_numel + a0_numel - o0_numel)",
    # 2/N (x - y) * grad: the difference, the constant scale, the product with grad_output
    "aten.mse_loss_backward.default": "(3 * a1_numel)",
    # x - max - log(sum(exp(x - max))): the subtraction, exp, the sum's add, the final subtraction
    "aten._log_softmax.default": "(4 * a0_numel)",
    # grad - exp(out) * sum(grad): exp, product, the sum's add, the subtraction
    "aten._log_softmax_backward_data.default": "(4 * o0_numel)",
    # softmax as log_softmax: exp(x - max) / sum(exp(x - max)): the subtraction, exp, the sum's
    # add, the division (_safe_softmax, attention's, also zeroes fully masked rows: no arithmetic)
    **{op: "(4 * a0_numel)" for op in ("aten._softmax.default", "aten._safe_softmax.default", "aten.softmax.int")},
    # out * (grad - sum(grad * out)): the product, the sum's add, the subtraction, the product
    "aten._softmax_backward_data.default": "(4 * o0_numel)",
    # per target: the negation and the sum (forward) or the scale (backward)
    "aten.nll_loss_forward.default": "(2 * a1_numel)",
    "aten.nll_loss_backward.default": "(2 * a2_numel)",
    # a running sum along dim: each line of n elements takes n - 1 adds (sql.CUMSUM_ADDS)
    **{op: CUMSUM_ADDS for op in ("aten.cumsum.default", "aten.cumsum_.default")},
    # selections: each element taken from one operand or the fill value, no arithmetic
    **{op: ZERO for op in SELECTIONS},
}

# Layer norm (beyond SpikingJelly, which has no rule): SpikingJelly's training batch norm with
# its C per-channel statistics replaced by G = numel / prod(normalized_shape) per-row ones and no
# running statistics: mean n, variance 2n + 2G, inverse std 2G, normalisation 2n, then one
# product per element with a weight and one add with a bias.
_LAYER_NORM = (
    f"(5 * a0_numel + 4 * {undecomposed.LAYER_NORM_ROWS} + CASE WHEN a2_present THEN a0_numel ELSE 0 END"
    " + CASE WHEN a3_present THEN a0_numel ELSE 0 END)"
)
EXTRA_RULES["aten.native_layer_norm.default"] = _LAYER_NORM
# Its backward, native_layer_norm_backward(grad_out a0, x a1, normalized_shape, mean a3, rstd a4,
# weight a5, bias a6, output_mask [7]), n = numel(grad_out), G = numel(mean) rows of D = n / G:
# grad_x as SpikingJelly's training batch norm backward with its C statistics replaced by the G
# rows', 2n + (n - G) + (2n - G) + (5n + 2G) = 10n; grad_w re-normalises x (2n), multiplies by
# grad_out (n) and sums over the rows (n - D); grad_b sums over the rows (n - D). Each
# gradient asked for counts (SpikingJelly's batch norm counts grad_w and grad_b only without
# grad_x; a layer norm's are sums over other dimensions, not by-products of grad_x).
_LN_D = "(a0_numel // greatest(a3_numel, 1))"
EXTRA_RULES["aten.native_layer_norm_backward.default"] = (
    f"(CASE WHEN {arg_item(7, 0)} THEN 10 * a0_numel ELSE 0 END"
    f" + CASE WHEN {arg_item(7, 1)} AND a5_present THEN 4 * a0_numel - {_LN_D} ELSE 0 END"
    f" + CASE WHEN {arg_item(7, 2)} AND a6_present THEN a0_numel - {_LN_D} ELSE 0 END)"
)
# Activation functions and their backward ops: one FLOP per element (analyze/counters/activations.py).
EXTRA_RULES.update(activations.FLOP)

# Composite ops recorded whole (analyze/counters/undecomposed.py): the FLOPs of their decomposition.
# conv{n}d: convolution's 2 * C_in/g * prod(K) * prod(O) * C_out * N, with prod(O) * C_out * N =
# numel(out); linear: mm's 2mnk = 2 * numel(x) * out_features, plus addmm's mn = numel(out) with a bias.
UNDECOMPOSED_RULES: dict[str, str] = {
    **{op: f"(2 * {undecomposed.CONV_TAPS} * o0_numel + CASE WHEN a2_present THEN o0_numel ELSE 0 END)"
       for op in undecomposed.CONV_ND},
    undecomposed.LINEAR: (f"(2 * a0_numel * {undecomposed.LINEAR_OUT}"
                          " + CASE WHEN a2_present THEN o0_numel ELSE 0 END)"),
    undecomposed.BATCH_NORM: _BATCH_NORM,
    undecomposed.LAYER_NORM: _LAYER_NORM,
    **{op: undecomposed.SDPA_FLOP for op in undecomposed.SDPA},
}
EXTRA_RULES.update(UNDECOMPOSED_RULES)
# Torch's fused transformer fast path: the FLOPs of the same layer's unfused ops (fused_attention.py).
EXTRA_RULES.update(fused_attention.FLOP)

# What a GPU run dispatches instead (analyze/counters/device_ops.py): batch norm's other forms
# as native_batch_norm(_backward) with their training flag; cudnn_batch_norm_backward's n from
# grad_out (a1), C from its weight, trained, every gradient asked for. Fused optimizers, the
# multi-tensor ops, GradScaler's and dropout's as derived there. SpikingJelly's fused neuron ops
# as their CPU decomposition (analyze/counters/sj_neurons). (SDPA's are in RULES above:
# torch.utils.flop_counter's formulas, GQA included, with b * h from the query.)
DEVICE_RULES: dict[str, str] = {
    **{op: _batch_norm(training) for op, training in device_ops.BATCH_NORM_FORWARD.items()},
    **{op: _batch_norm_backward("coalesce(a2_numel, a1_shape[2])") for op in device_ops.BATCH_NORM_BACKWARD},
    device_ops.CUDNN_BATCH_NORM_BACKWARD: _batch_norm_backward("a2_numel", "a1_numel", "true", ("true",) * 3),
    **{op: rules[0] for op, rules in device_ops.FUSED_OPTIMIZERS.items()},
    **{op: rules[0] for op, rules in device_ops.AMP.items()},
    **device_ops.DROPOUT_FLOP,
    **device_ops.FOREACH_FLOP,
    **sj_neurons.FLOP,
}
EXTRA_RULES.update({op: rule for op, rule in DEVICE_RULES.items() if op not in RULES})
RULES.update(EXTRA_RULES)

# compat="spikingjelly": its formulas where they differ (None: an op it has no rule for).
SPIKINGJELLY: dict[str, str | None] = {
    **{op: None for op in EXTRA_RULES},
    **{f"aten.{name}.Scalar": _alpha_add(ALPHA_KWARG) for name in ("add", "add_", "sub", "sub_", "rsub")},
    "aten.native_batch_norm_backward.default": _batch_norm_backward("a2_numel"),
}
# Rows where SpikingJelly raises instead of counting (compat reports them as errors).
SPIKINGJELLY_ABORTS: dict[str, str] = {
    "aten.native_batch_norm_backward.default": "NOT a2_present",
}
