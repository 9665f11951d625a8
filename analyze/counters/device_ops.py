"""The ops a GPU run dispatches and a CPU run never shows: their argument layouts and the
rules the counter modules share for them (tests/test_gpu_op_vocabulary.py records each one).

A dispatch mode sees the ops below the autograd layer, so which ones a CUDA run records
follows from torch's dispatch tables (torch 2.13):
* convolution: `aten.convolution` / `convolution_backward` on every device (cuDNN is chosen
  inside their CUDA kernels; `cudnn_convolution` is called from there, never seen).
* batch norm: the composite `batch_norm` -> `_batch_norm_impl_index` calls `cudnn_batch_norm`
  on CUDA (float inputs, weight and bias given), else `native_batch_norm`; its backward is
  `cudnn_batch_norm_backward` in training, `native_batch_norm_backward` in eval. The
  `_native_batch_norm_legit*` and `_batch_norm_with_update`/`_no_update`/`batch_norm_backward`
  family appear in exported and compiled programs; they are listed too, layouts permitting.
* attention: `scaled_dot_product_attention` picks `_scaled_dot_product_{flash,efficient,
  cudnn}_attention` (+ `_backward`); their FLOP and byte rules live with the CPU flash one's.
* dropout: `dropout` calls `native_dropout` (+ `native_dropout_backward`) on CUDA, where CPU
  runs bernoulli_, div_ and mul; `_fused_dropout` and `_masked_scale` are their older forms.
* optimizers: on CUDA Adam/AdamW/SGD default to the multi-tensor `_foreach_*` path; with
  `fused=True` one `_fused_adam_`/`_fused_adamw_`/`_fused_sgd_` (`_fused_adagrad_` is CPU
  only) after a `_foreach_add_` of the steps. GradScaler runs
  `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`.
* SpikingJelly 2.0.0 neurons: on CUDA (and meta) one registered op per multi-step call,
  `sj_<neuron>.forward.default` (`.backward.default` in backward): the cupy/triton kernel is
  behind it, so the trace holds the op with its arguments but none of the per-step aten ops a
  CPU run decomposes into. sj_if, sj_lif, sj_plif, sj_qif, sj_eif and sj_izhikevich count as that
  decomposition (sj_neurons/); the other neurons' ops (sj_ilif,
  sj_activation_aware_if, sj_stbif, ...) are reported as unknown by flop, memory_access and ac
  (applicability.py); neuron_state has SpikingJelly's CUDA path for them.

Lists are summed over their items: `a0_items_numel` is the elements of all of a list's tensors.
"""

from __future__ import annotations

from spiketrace.analyze.counters.sql import arg, kwarg

# Batch norm forwards: op -> SQL of `training`; every one has (x, weight, bias, running_mean,
# running_var) at args 0-4 (running stats absent in .no_stats, whose arg 3 is the flag) and
# (out, save_mean, save_invstd|save_var, ...) as outputs 0-2, as native_batch_norm has.
BATCH_NORM_FORWARD: dict[str, str] = {
    "aten.native_batch_norm.default": arg(5, "BOOLEAN"),
    # cudnn_batch_norm(x, w, b, rm, rv, training, exponential_average_factor, eps) -> (+ reserve)
    "aten.cudnn_batch_norm.default": arg(5, "BOOLEAN"),
    "aten._native_batch_norm_legit.default": arg(5, "BOOLEAN"),
    "aten._native_batch_norm_legit_functional.default": arg(5, "BOOLEAN"),
    "aten._native_batch_norm_legit.no_stats": arg(3, "BOOLEAN"),
    "aten._native_batch_norm_legit_no_training.default": "false",
    "aten._batch_norm_with_update.default": "true",
    "aten._batch_norm_with_update_functional.default": "true",
    "aten._batch_norm_no_update.default": "false",
}
# Batch norm backwards with native_batch_norm_backward's layout: (grad_out, x, weight,
# running_mean, running_var, save_mean, save_invstd, train [7], eps, output_mask [9]);
# batch_norm_backward names train `update` and appends the reserve.
BATCH_NORM_BACKWARD = ("aten.native_batch_norm_backward.default", "aten.batch_norm_backward.default")
# cudnn_batch_norm_backward(x a0, grad_out a1, weight a2, rm, rv, save_mean a5, save_var a6,
# eps, reserve a8): training only (eval backward is native_batch_norm_backward) and all three
# gradients always, so native's rules with train = true and output_mask = [true, true, true].
CUDNN_BATCH_NORM_BACKWARD = "aten.cudnn_batch_norm_backward.default"

N = "coalesce(a0_items_numel, 0)"  # elements of the first list (the params / the tensors updated)


def items_bytes(slot: str) -> str:
    return f"coalesce({slot}_items_bytes, 0)"


def _alpha(alpha: str) -> str:
    # add(x, y, alpha): one op per element, one more for the scaling when alpha != 1
    return f"CASE WHEN {alpha} = 1 THEN {N} ELSE 2 * {N} END"


def _flag(name: str) -> str:
    return kwarg(name, "false", "BOOLEAN")


# Fused optimizers: the single-tensor (CPU default) step's ops, per element, with our rules
# (tests compare a fused and an unfused step on CPU). The step counter's `+= 1` is a separate
# `_foreach_add_` before the fused op, so it is not counted here.
# Adam: lerp_ 3, mul_ 1, addcmul_ 2 (+1 as value = 1 - beta2 is not 1), sqrt 1, div 1,
# add_ (eps) 1, addcdiv_ 3 (value = -step_size, not 1): 12 + [beta2 != 0]. Extra: L2 weight
# decay grad.add(param, alpha=wd) 1 or 2 (Adam), decoupled param.mul_ 1 (AdamW); maximize's
# neg 1; amsgrad's maximum 1 (a comparison, as eq/lt count one); a grad_scale's unscaling 1
# (unfused, GradScaler's _amp_foreach_non_finite_check_and_unscale_ does it).
_WD, _MAXIMIZE, _AMSGRAD = kwarg("weight_decay", 0), _flag("maximize"), _flag("amsgrad")
_ADAM_COMMON = (
    f"(12 * {N} + CASE WHEN {kwarg('beta2', 0.999)} <> 0 THEN {N} ELSE 0 END"
    f" + CASE WHEN {_AMSGRAD} THEN {N} ELSE 0 END + CASE WHEN {_MAXIMIZE} THEN {N} ELSE 0 END"
    f" + CASE WHEN k_grad_scale_present THEN {N} ELSE 0 END"
)
ADAM_FLOP = f"{_ADAM_COMMON} + CASE WHEN {_WD} <> 0 THEN {_alpha(_WD)} ELSE 0 END)"
ADAMW_FLOP = f"{_ADAM_COMMON} + CASE WHEN {_WD} <> 0 THEN {N} ELSE 0 END)"
# SGD: param.add_(grad, alpha=-lr) 2 (1 for lr = -1); weight decay grad.add(param, alpha=wd);
# momentum after the first step buf.mul_ 1 + buf.add_(grad, alpha=1 - dampening) (the first
# step clones grad: 0); nesterov grad.add(buf, alpha=momentum); maximize's neg.
_MOMENTUM = kwarg("momentum", 0)
_MOVING = f"({_MOMENTUM} <> 0 AND NOT {_flag('is_first_step')})"
_KEPT = f"(1 - {kwarg('dampening', 0)})"
_STEP = f"(-{kwarg('lr', 0.001)})"  # a tensor lr (.tensor_lr) is not a number: 0.001 stands in
SGD_FLOP = (
    f"(CASE WHEN {_flag('maximize')} THEN {N} ELSE 0 END"
    f" + CASE WHEN {_WD} <> 0 THEN {_alpha(_WD)} ELSE 0 END"
    f" + CASE WHEN {_MOVING} THEN {N} + {_alpha(_KEPT)} ELSE 0 END"
    f" + CASE WHEN {_MOMENTUM} <> 0 AND {_flag('nesterov')} THEN {_alpha(_MOMENTUM)} ELSE 0 END"
    f" + {_alpha(_STEP)}"
    f" + CASE WHEN k_grad_scale_present THEN {N} ELSE 0 END)"
)
# Adagrad: addcmul_ (value 1) 2, sqrt 1, add_ (eps) 1, addcdiv_ (value -clr) 3; weight decay,
# maximize and grad_scale as Adam's.
ADAGRAD_FLOP = (
    f"(7 * {N} + CASE WHEN {_WD} <> 0 THEN {_alpha(_WD)} ELSE 0 END"
    f" + CASE WHEN {_MAXIMIZE} THEN {N} ELSE 0 END + CASE WHEN k_grad_scale_present THEN {N} ELSE 0 END)"
)
# ACs, likewise: Adam lerp_ 2 + addcmul_ 1 + add_ 1 + addcdiv_ 1, + 1 for L2 weight decay's
# add (AdamW's is a product); SGD the adds: param 1, weight decay 1, momentum 1, nesterov 1;
# Adagrad addcmul_ + add_ + addcdiv_ 3, + 1 for weight decay. Optimizer operands are not spike
# tensors: the unfused adds' both-binary case (nnz(x) + nnz(y)) is not taken.
ADAM_AC = f"(5 * {N} + CASE WHEN {_WD} <> 0 THEN {N} ELSE 0 END)"
ADAMW_AC = f"(5 * {N})"
SGD_AC = (
    f"({N} + CASE WHEN {_WD} <> 0 THEN {N} ELSE 0 END + CASE WHEN {_MOVING} THEN {N} ELSE 0 END"
    f" + CASE WHEN {_MOMENTUM} <> 0 AND {_flag('nesterov')} THEN {N} ELSE 0 END)"
)
ADAGRAD_AC = f"(3 * {N} + CASE WHEN {_WD} <> 0 THEN {N} ELSE 0 END)"
# Bytes: the fused kernel's one pass, not the unfused ops' temporaries: the lists updated in
# place read and written, the others read (an empty list, e.g. max_exp_avg_sqs without
# amsgrad or momentum buffers without momentum, moves nothing), and the scalar tensors read.
_SCALARS = "coalesce(k_grad_scale_bytes, 0) + coalesce(k_found_inf_bytes, 0)"
ADAM_BYTES = (
    f"(2 * ({items_bytes('a0')} + {items_bytes('a2')} + {items_bytes('a3')} + {items_bytes('a4')})"
    f" + {items_bytes('a1')} + {items_bytes('a5')} + {_SCALARS})"
)
SGD_BYTES = (
    f"(2 * {items_bytes('a0')} + {items_bytes('a1')}"
    f" + CASE WHEN {_flag('is_first_step')} THEN 1 ELSE 2 END * {items_bytes('a2')}"
    f" + coalesce(k_lr_bytes, 0) + {_SCALARS})"
)
ADAGRAD_BYTES = (
    f"(2 * ({items_bytes('a0')} + {items_bytes('a2')}) + {items_bytes('a1')} + {items_bytes('a3')} + {_SCALARS})"
)
FUSED_OPTIMIZERS = {
    "aten._fused_adam_.default": (ADAM_FLOP, ADAM_AC, ADAM_BYTES),
    "aten._fused_adamw_.default": (ADAMW_FLOP, ADAMW_AC, ADAM_BYTES),
    "aten._fused_sgd_.default": (SGD_FLOP, SGD_AC, SGD_BYTES),
    "aten._fused_sgd_.tensor_lr": (SGD_FLOP, SGD_AC, SGD_BYTES),
    "aten._fused_adagrad_.default": (ADAGRAD_FLOP, ADAGRAD_AC, ADAGRAD_BYTES),
}

# GradScaler. _amp_foreach_non_finite_check_and_unscale_(grads a0 [list], found_inf a1,
# inv_scale a2): per element a finiteness test and a product with inv_scale; the grads read
# and written, inv_scale read, found_inf written.
# _amp_update_scale_(scale a0, growth_tracker a1, found_inf a2, growth, backoff, interval):
# one element each; the usual step (no overflow, no growth) tests found_inf, adds 1 to the
# tracker and compares it with the interval: 3 FLOPs; scale and tracker read and written.
AMP = {
    "aten._amp_foreach_non_finite_check_and_unscale_.default": (
        f"(2 * {N})", f"(2 * {items_bytes('a0')} + coalesce(a1_bytes, 0) + coalesce(a2_bytes, 0))"),
    "aten._amp_update_scale_.default": (
        "3", "(2 * coalesce(a0_bytes, 0) + 2 * coalesce(a1_bytes, 0) + coalesce(a2_bytes, 0))"),
}

# Dropout on CUDA, one op where CPU runs bernoulli_ (no FLOP), div_ of the mask by 1 - p and
# the product with x: 2 FLOPs per element in training; eval (train=False) copies x. The
# backward grad * mask * scale: 2. Bytes: every operand read, every result written once.
DROPOUT_FLOP = {
    "aten.native_dropout.default": f"CASE WHEN coalesce({arg(2, 'BOOLEAN')}, true) THEN 2 * a0_numel ELSE 0 END",
    "aten._fused_dropout.default": "(2 * a0_numel)",  # p here is the keep probability; training only
    "aten.native_dropout_backward.default": "(2 * a0_numel)",
    "aten._masked_scale.default": "(2 * a0_numel)",
}


# The multi-tensor (`_foreach_*`) forms of the elementwise ops: each its single-tensor
# twin's rule, summed over the list. Overloads: .Scalar / .ScalarList (a number per tensor) /
# .Tensor (one tensor) / .List (a tensor per tensor) / .default (unary). In-place forms
# (`_foreach_add_`) return nothing: their result is the first list, written back.
def _foreach(names, overloads, rule: str) -> dict[str, str]:
    return {f"aten._foreach_{name}{suffix}.{overload}": rule
            for name in names for suffix in ("", "_") for overload in overloads}


_SCALED = kwarg("alpha", 1)
_VALUE_ALL_ONE = "list_bool_and(list_transform(json_extract(args, '$[3]')::DOUBLE[], lambda s: s = 1))"
FOREACH_FLOP: dict[str, str] = {
    # add/sub: 1 per element; .List with alpha != 1 also scales the other list (add's rule:
    # numel(other) + numel(out)); .Tensor with alpha != 1 scales one tensor per item, a count the
    # trace holds only per list: left unknown (NULL) rather than guessed
    **_foreach(("add", "sub"), ("Scalar", "ScalarList"), N),
    **_foreach(("add", "sub"), ("List",), f"({N} + CASE WHEN {_SCALED} <> 1 THEN coalesce(a1_items_numel, 0) ELSE 0 END)"),
    **_foreach(("add", "sub"), ("Tensor",), f"CASE WHEN {_SCALED} = 1 THEN {N} END"),
    **_foreach(("mul", "div"), ("Scalar", "ScalarList", "Tensor", "List"), N),
    **_foreach(("neg", "sqrt", "rsqrt", "reciprocal", "exp", "log"), ("default",), N),
    **_foreach(("sigmoid",), ("default",), f"(4 * {N})"),
    # maximum/minimum (amsgrad's): one comparison per element, as eq/lt count one
    **_foreach(("maximum", "minimum"), ("List", "Scalar", "ScalarList"), N),
    # self + value * t1 (*|/) t2: 2, + 1 unless value is 1 (.Scalar: args[3], default 1;
    # .ScalarList: unless every value is 1; .Tensor: values not recorded, the optimizers'
    # step sizes, not 1)
    **_foreach(("addcmul", "addcdiv"), ("Scalar",),
               f"(2 * {N} + CASE WHEN coalesce({arg(3, 'DOUBLE')}, 1) <> 1 THEN {N} ELSE 0 END)"),
    **_foreach(("addcmul", "addcdiv"), ("ScalarList",), f"(2 * {N} + CASE WHEN {_VALUE_ALL_ONE} THEN 0 ELSE {N} END)"),
    **_foreach(("addcmul", "addcdiv"), ("Tensor",), f"(3 * {N})"),
    **_foreach(("lerp",), ("Scalar", "List", "ScalarList"), f"(3 * {N})"),
}
FOREACH_AC: dict[str, str] = {
    **_foreach(("add", "sub"), ("Scalar", "ScalarList", "Tensor", "List"), N),
    **_foreach(("addcmul", "addcdiv"), ("Scalar", "ScalarList", "Tensor"), N),
    **_foreach(("lerp",), ("Scalar", "List", "ScalarList"), f"(2 * {N})"),
}
# Bytes: every operand read and every result written once, the in-place forms' result being
# their first list.
FOREACH_BYTES: dict[str, str] = {
    op: f"(tensor_bytes + {items_bytes('a0')})" if op.split(".")[1].endswith("_") else "tensor_bytes"
    for op in FOREACH_FLOP
}
