"""Composite ops recorded whole: what every counter needs to count them as their decomposition.

Capture decomposes composite ops while recording (capture/ops/decompositions.py), so a trace
usually holds `aten.convolution`, `aten.addmm`, `aten.native_batch_norm`, ... But an op can
still be recorded whole (a backend that dispatches it, an older capture, a mode stacked
under ours), and a counter without a rule for it would leave that work out. Each counter
module gives these ops the value of the ops they decompose into (tests/test_undecomposed_ops.py
captures both forms); this module holds the op lists and the shape facts they share.

Arguments as dispatched (trailing defaults may be omitted, so every optional one is read with
a default):
* `aten.conv{1,2,3}d.default|padding(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1)`
  -> `aten.convolution(x, w, bias, stride, padding, dilation, False, 0, groups)` (an unbatched x
  gets a batch dim of 1; `padding='same'` with an even total pads x first). Every formula
  is written over numel(out) = N * C_out * prod(O), so it holds batched or not.
* `aten.linear.default(x, w, bias=None)` -> `t(w)`, then `mm(x, w.T)` or `addmm(bias, x, w.T)`
  (x of more than 2 dims through views): rows = numel(x) / in_features, n = out_features.
* `aten.batch_norm.default(x, w, b, running_mean, running_var, training, momentum, eps,
  cudnn_enabled)` -> `native_batch_norm` with the same first eight arguments (its extra
  outputs save_mean and save_invstd: C values each, in float32 or the input's float64).
* `aten.layer_norm.default(x, normalized_shape, w=None, b=None, eps, cudnn_enable)` ->
  `native_layer_norm(x, normalized_shape, w, b, eps)` (extra outputs mean and rstd: G values
  each, G = numel(x) / prod(normalized_shape)).
* `aten.scaled_dot_product_attention.default(q, k, v, attn_mask=None, dropout_p, is_causal,
  scale, enable_gqa)` -> on CPU `_scaled_dot_product_flash_attention_for_cpu` (the SDPA rule:
  2 * batch * sq * sk * (d + dv) FLOPs over q's leading dims, q, k, v, mask and out bytes);
  a backend's math path (bmm, softmax, ...) counts as its own ops instead.
"""

from __future__ import annotations

from spiketrace.analyze.counters.sql import arg

CONV_ND = tuple(f"aten.conv{n}d.{overload}" for n in (1, 2, 3) for overload in ("default", "padding"))
LINEAR = "aten.linear.default"
BATCH_NORM = "aten.batch_norm.default"
LAYER_NORM = "aten.layer_norm.default"
SDPA = ("aten.scaled_dot_product_attention.default", "aten._scaled_dot_product_attention_math.default")
# The fused kernels SDPA dispatches to, aten._scaled_dot_product_<kernel>(.._backward).default
SDPA_KERNELS = ("flash_attention_for_cpu", "flash_attention", "efficient_attention", "cudnn_attention")

# conv{n}d: C_in/groups and prod(kernel) from the weight, the output's numel, groups (default 1)
CONV_TAPS = "(a1_shape[2] * prod(a1_shape[3:]))"  # (C_in/g) * prod(K): taps per output element
CONV_GROUPS = f"coalesce({arg(6)}, 1)"
CONV_OUT_PER_CHANNEL = "(o0_numel // greatest(a1_shape[1], 1))"  # N * prod(O)
# linear: rows of the GEMM, out_features
LINEAR_ROWS = "(a0_numel // greatest(a1_shape[2], 1))"
LINEAR_OUT = "a1_shape[1]"
# batch norm's save_mean and save_invstd: C values each, float32 (float64 for a float64 input)
BATCH_NORM_SAVED_BYTES = "(2 * a0_shape[2] * CASE WHEN a0_bytes = 8 * a0_numel THEN 8 ELSE 4 END)"
# layer norm's mean and rstd: G values each, G = numel / prod(normalized_shape)
LAYER_NORM_ROWS = "(a0_numel // greatest(prod(json_extract(args, '$[1]')::BIGINT[]), 1))"
LAYER_NORM_SAVED_BYTES = f"(2 * {LAYER_NORM_ROWS} * CASE WHEN a0_bytes = 8 * a0_numel THEN 8 ELSE 4 END)"
# SDPA over q's leading dims (4-D in the fused variants, any rank here): batch * sq = numel(q) / d
SDPA_FLOP = "(2 * (a0_numel // greatest(a0_shape[-1], 1)) * a1_shape[-2] * (a0_shape[-1] + a2_shape[-1]))"
