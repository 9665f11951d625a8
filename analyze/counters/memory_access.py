"""Memory access bytes, as SpikingJelly 2.0.0's MemoryAccessCounter counts them.

bytes(t) = numel * element_size, 0 for a missing (non-tensor) operand. One difference,
fixed by default (docs/deviations.md): SpikingJelly maps the unary `logical_not` to its
binary rule, which unpacks two arguments and aborts the run; we count it as a unary op.
"""

from __future__ import annotations

from spiketrace.analyze.counters import activations, device_ops, fused_attention, sj_neurons, undecomposed
from spiketrace.analyze.counters.sql import SELECTIONS, arg, arg_item, kwarg


def b(slot: str) -> str:
    return f"coalesce({slot}_bytes, 0)"


def total(*slots: str) -> str:
    return "(" + " + ".join(b(s) for s in slots) + ")"


_READ_WRITE = total("a0", "o0")
_BINARY = total("a0", "a1", "o0")
_GEMM = total("a0", "a1", "o0")
_GEMM_BIAS = f"({total('a1', 'a2', 'o0')} + CASE WHEN {kwarg('beta', 1)} <> 0 THEN {b('a0')} ELSE 0 END)"

_CONV_BACKWARD = (
    f"({b('a0')} + CASE WHEN {arg_item(10, 0)} THEN {b('a2')} + {b('o0')} ELSE 0 END"
    f" + CASE WHEN {arg_item(10, 1)} THEN {b('a1')} + {b('o1')} ELSE 0 END"
    f" + CASE WHEN {arg_item(10, 2)} THEN {b('o2')} ELSE 0 END)"
)


def _batch_norm(training: str) -> str:
    return (f"({total('a0', 'a1', 'a2', 'a3', 'a4')} + CASE WHEN {training} THEN {total('o0', 'o1', 'o2')}"
            f" ELSE {b('o0')} END)")


_BATCH_NORM = _batch_norm(arg(5, "BOOLEAN"))


def _batch_norm_backward() -> str:
    # (grad_out a0, x a1, gamma a2, rm, rv, save_mean a5, save_invstd a6, train [7], eps, mask [9])
    m0, m1, m2 = arg_item(9, 0), arg_item(9, 1), arg_item(9, 2)
    return (
        f"(CASE WHEN {arg(7, 'BOOLEAN')} THEN"
        f" CASE WHEN {m0} THEN {total('a0', 'a1', 'a5', 'a6', 'a2')}"
        f" WHEN {m1} THEN {total('a0', 'a1', 'a5', 'a6')} WHEN {m2} THEN {b('a0')} ELSE 0 END"
        f" ELSE CASE WHEN {m0} THEN {total('a0', 'a6', 'a2')} ELSE 0 END"
        f" + CASE WHEN {m1} THEN {total('a1', 'a5')} + CASE WHEN NOT {m0} THEN {total('a6', 'a0')} ELSE 0 END ELSE 0 END"
        f" + CASE WHEN {m2} AND NOT {m0} AND NOT {m1} THEN {b('a0')} ELSE 0 END END)"
    )


# SDPA: q, k, v and the attention bias (args[3] if a tensor, else kwargs attn_mask/attn_bias).
_SDPA_BIAS = "coalesce(a3_bytes, k_attn_mask_bytes, k_attn_bias_bytes, 0)"
_SDPA = f"({total('a0', 'a1', 'a2', 'o0')} + {_SDPA_BIAS})"
_SDPA_BACKWARD_BIAS = {"flash_attention_for_cpu": None, "flash_attention": None, "efficient_attention": 4, "cudnn_attention": 8}


def _sdpa_backward(bias_index: int | None) -> str:
    bias = f"coalesce(a{bias_index}_bytes, k_attn_mask_bytes, k_attn_bias_bytes, 0)" if bias_index else (
        "coalesce(k_attn_mask_bytes, k_attn_bias_bytes, 0)"
    )
    return f"({total('a0', 'a1', 'a2', 'a3')} + {bias} + coalesce(out_bytes, 0))"


_BINARY_OPS = [
    f"aten.{name}.{overload}"
    for name in ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_")
    for overload in ("Tensor", "Scalar")
] + ["aten.rsub.Tensor", "aten.rsub.Scalar"] + [
    f"aten.{name}.{overload}" for name in ("eq", "ne", "lt", "le", "gt", "ge") for overload in ("Tensor", "Scalar")
] + [f"aten.logical_{name}.default" for name in ("and", "or", "xor")]

_READ_WRITE_OPS = (
    "aten.avg_pool2d.default", "aten.sum.default", "aten.sum.dim_IntList", "aten.mean.dim", "aten.neg.default",
    "aten.neg_.default", "aten.sigmoid.default", "aten.sigmoid_.default", "aten.clone.default",
    "aten._to_copy.default",
)

RULES: dict[str, str] = {
    "aten.mm.default": _GEMM,
    "aten.bmm.default": _GEMM,
    "aten.addmm.default": _GEMM_BIAS,
    "aten.baddbmm.default": _GEMM_BIAS,
    "aten.convolution.default": total("a0", "a1", "o0", "a2"),
    "aten.convolution_backward.default": _CONV_BACKWARD,
    "aten.native_batch_norm.default": _BATCH_NORM,
    "aten.native_batch_norm_backward.default": _batch_norm_backward(),
    "aten.max_pool2d_with_indices.default": total("a0", "o0", "o1"),
    "aten.max_pool2d_with_indices_backward.default": total("a0", "a1", "o0"),
    **{op: _READ_WRITE for op in _READ_WRITE_OPS},
    **{op: _BINARY for op in _BINARY_OPS},
    "aten.logical_not.default": _READ_WRITE,
    "aten.stack.default": f"(coalesce(a0_items_bytes, 0) + {b('o0')})",
    "aten.full_like.default": b("o0"),
    "aten.ones_like.default": b("o0"),
    "aten.select_backward.default": _READ_WRITE,
    **{f"aten._scaled_dot_product_{name}.default": _SDPA for name in _SDPA_BACKWARD_BIAS},
    **{f"aten._scaled_dot_product_{name}_backward.default": _sdpa_backward(i) for name, i in _SDPA_BACKWARD_BIAS.items()},
    **{
        op: "0"
        for op in (
            "aten.view.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.unbind.int",
            "aten.empty.memory_format", "aten.select.int", "aten.detach.default", "aten.t.default",
            "aten.expand.default",
        )
    },
}

# Beyond SpikingJelly (no rule there; docs/deviations.md): the optimizer, loss, softmax and
# activation ops the FLOP counter also covers read every operand and write every result once.
EXTRA_RULES: dict[str, str] = {
    **{op: "tensor_bytes" for op in (
        *(f"aten.{name}.default" for name in ("addcmul", "addcmul_", "addcdiv", "addcdiv_")),
        *(f"aten.{name}.{overload}" for name in ("lerp", "lerp_") for overload in ("Scalar", "Tensor")),
        *(f"aten.{name}.default" for name in ("sqrt", "sqrt_", "rsqrt", "rsqrt_", "reciprocal", "reciprocal_",
                                               "exp", "exp_", "log", "log_")),
        "aten.mse_loss.default", "aten.mse_loss_backward.default", "aten._log_softmax.default",
        "aten._log_softmax_backward_data.default", "aten.nll_loss_forward.default", "aten.nll_loss_backward.default",
        "aten._softmax.default", "aten._safe_softmax.default", "aten.softmax.int", "aten._softmax_backward_data.default",
        "aten.cumsum.default", "aten.cumsum_.default", *SELECTIONS,
    )},
    # activation functions and their backward ops (analyze/counters/activations.py)
    **activations.BYTES,
    # a new tensor written once
    **{f"aten.{name}.default": b("o0") for name in ("zeros_like", "empty_like")},
    **{f"aten.arange.{overload}": b("o0") for overload in ("default", "start", "start_step")},
    # nested tensors: built from parts as stack is, padded by a copy, viewed over their values
    # (their bytes are the components' actual elements: numel of a nested tensor is their total)
    "aten._nested_tensor_from_tensor_list.default": f"(coalesce(a0_items_bytes, 0) + {b('o0')})",
    "aten.to_padded_tensor.default": _READ_WRITE,
    "aten._nested_view_from_jagged.default": "0",
}
# Layer norm: every operand read and every result (out, mean, rstd) written once.
EXTRA_RULES["aten.native_layer_norm.default"] = "tensor_bytes"
# Its backward: grad_out, x, mean, rstd, weight and bias read, the gradients asked for written.
EXTRA_RULES["aten.native_layer_norm_backward.default"] = "tensor_bytes"
# Views SpikingJelly has no rule for (it has view, unsqueeze, squeeze.dim, select, t, expand,
# unbind: 0): a view shares its base's storage, so no byte moves.
EXTRA_RULES.update({op: "0" for op in (
    "aten.transpose.int", "aten._unsafe_view.default", "aten.permute.default", "aten._reshape_alias.default",
    "aten.alias.default", "aten.as_strided.default", "aten.slice.Tensor", "aten.split.Tensor",
    "aten.split_with_sizes.default", "aten.squeeze.default", "aten.squeeze.dims", "aten.view_as.default",
    "aten.unfold.default", "aten.diagonal.default",
)})

# Composite ops recorded whole (analyze/counters/undecomposed.py): the bytes of their decomposition,
# whose views and transposes move none. conv{n}d and linear: x, w, out and the bias; batch norm and
# layer norm: also the statistics their native form writes besides out.
UNDECOMPOSED_RULES: dict[str, str] = {
    **{op: total("a0", "a1", "o0", "a2") for op in (*undecomposed.CONV_ND, undecomposed.LINEAR)},
    undecomposed.BATCH_NORM: (
        f"({total('a0', 'a1', 'a2', 'a3', 'a4')} + {b('o0')}"
        f" + CASE WHEN {arg(5, 'BOOLEAN')} THEN {undecomposed.BATCH_NORM_SAVED_BYTES} ELSE 0 END)"
    ),
    undecomposed.LAYER_NORM: f"(tensor_bytes + {undecomposed.LAYER_NORM_SAVED_BYTES})",
    **{op: _SDPA for op in undecomposed.SDPA},
}
EXTRA_RULES.update(UNDECOMPOSED_RULES)
# Torch's fused transformer fast path: the bytes of the same layer's unfused ops, copies
# included, a mask at the fused op's shape (fused_attention.py).
EXTRA_RULES.update(fused_attention.BYTES)

# What a GPU run dispatches instead (analyze/counters/device_ops.py). Batch norm's other forms
# as native_batch_norm(_backward) (cudnn's reserve output is not counted, as native has none);
# cudnn_batch_norm_backward as native's trained backward with every gradient: grad_out (a1),
# x (a0), save_mean, save_var and the weight. Fused optimizers: their one pass; GradScaler's
# ops as derived there; dropout every operand and result once; the multi-tensor ops as their
# twins, summed over the lists. SDPA's are in RULES above. zeros/full: a new tensor written
# once (fused optimizers' step tensors, GradScaler's scale). SpikingJelly's fused neuron ops:
# the bytes of their CPU decomposition, temporaries included (analyze/counters/sj_neurons).
DEVICE_RULES: dict[str, str] = {
    **{op: _batch_norm(training) for op, training in device_ops.BATCH_NORM_FORWARD.items()},
    **{op: _batch_norm_backward() for op in device_ops.BATCH_NORM_BACKWARD},
    device_ops.CUDNN_BATCH_NORM_BACKWARD: total("a1", "a0", "a5", "a6", "a2"),
    **{op: rules[2] for op, rules in device_ops.FUSED_OPTIMIZERS.items()},
    **{op: rules[1] for op, rules in device_ops.AMP.items()},
    **{op: "tensor_bytes" for op in device_ops.DROPOUT_FLOP},
    **device_ops.FOREACH_BYTES,
    **{f"aten.{name}.default": b("o0") for name in ("zeros", "ones", "full")},
    **sj_neurons.BYTES,
}
EXTRA_RULES.update({op: rule for op, rule in DEVICE_RULES.items() if op not in RULES})
RULES.update(EXTRA_RULES)

SPIKINGJELLY: dict[str, str | None] = {op: None for op in EXTRA_RULES}
SPIKINGJELLY_ABORTS: dict[str, str] = {"aten.logical_not.default": "true"}
