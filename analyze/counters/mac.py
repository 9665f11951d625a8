"""MACs, as SpikingJelly 2.0.0's MACCounter counts them: a product with a binary (spike)
operand costs no multiplication, so it counts 0 MACs."""

from __future__ import annotations

from spiketrace.analyze.counters import conv_backward, device_ops, fused_attention, undecomposed
from spiketrace.analyze.counters.sql import arg, values_known

# A product's operand of unknown values (a meta tensor) leaves its MACs unknown (ac.values_known).
_MM = values_known("CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a0_shape[1] * a0_shape[2] * a1_shape[2] END", "a0", "a1")
_ADDMM = values_known("CASE WHEN a1_is01 OR a2_is01 THEN 0 ELSE a1_shape[1] * a1_shape[2] * a2_shape[2] END", "a1", "a2")
_BMM = values_known("CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a0_shape[1] * a0_shape[2] * a0_shape[3] * a1_shape[3] END",
                    "a0", "a1")
_BADDBMM = values_known(
    "CASE WHEN a1_is01 OR a2_is01 THEN 0 ELSE a1_shape[1] * a1_shape[2] * a1_shape[3] * a2_shape[3] END", "a1", "a2")
_CONV = values_known(
    f"CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a1_shape[2] * prod(a1_shape[3:])"
    f" * CASE WHEN {arg(6, 'BOOLEAN')} THEN prod(a0_shape[3:]) ELSE prod(o0_shape[3:]) END"
    f" * a1_shape[1] * a0_shape[1] END", "a0", "a1"
)


def _batch_norm(training: str) -> str:
    return (f"(CASE WHEN a1_present THEN a0_numel ELSE 0 END"
            f" + CASE WHEN {training} AND a3_present THEN 2 * a0_shape[2] ELSE 0 END)")


_BATCH_NORM = _batch_norm(arg(5, "BOOLEAN"))

RULES: dict[str, str] = {
    "aten.mm.default": _MM,
    "aten.addmm.default": _ADDMM,
    "aten.bmm.default": _BMM,
    "aten.baddbmm.default": _BADDBMM,
    "aten.convolution.default": _CONV,
    "aten.native_batch_norm.default": _BATCH_NORM,
}
# Beyond SpikingJelly (docs/deviations.md), which has no rule for these. Layer norm: as batch
# norm's, one multiply per element with a weight (no running statistics to update).
_LAYER_NORM = "CASE WHEN a2_present THEN a0_numel ELSE 0 END"
EXTRA_RULES: dict[str, str] = {"aten.native_layer_norm.default": _LAYER_NORM}

# Composite ops recorded whole (analyze/counters/undecomposed.py), as their decomposition counts:
# conv{n}d C_in/g * prod(K) per output element, linear rows * in * out, 0 with a binary operand.
UNDECOMPOSED_RULES: dict[str, str] = {
    **{op: values_known(f"CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE {undecomposed.CONV_TAPS} * o0_numel END", "a0", "a1")
       for op in undecomposed.CONV_ND},
    undecomposed.LINEAR: values_known(
        f"CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a0_numel * {undecomposed.LINEAR_OUT} END", "a0", "a1"),
    undecomposed.BATCH_NORM: _BATCH_NORM,
    undecomposed.LAYER_NORM: _LAYER_NORM,
}
EXTRA_RULES.update(UNDECOMPOSED_RULES)
# Attention's two products (SDPA in every form) and torch's fused transformer fast path as the
# same layer's unfused ops (fused_attention.py).
EXTRA_RULES.update(fused_attention.MAC)
# A conv's backward: grad_x's and grad_w's products (conv_backward.py).
EXTRA_RULES[conv_backward.OP] = conv_backward.MAC
# Batch norm's other forms (cudnn_batch_norm on a GPU; analyze/counters/device_ops.py) as
# native_batch_norm. Its backwards have no MAC rule, as native_batch_norm_backward has none.
EXTRA_RULES.update({op: _batch_norm(training) for op, training in device_ops.BATCH_NORM_FORWARD.items()
                    if op not in RULES})
RULES.update(EXTRA_RULES)
SPIKINGJELLY: dict[str, str | None] = {op: None for op in EXTRA_RULES}
SPIKINGJELLY_ABORTS: dict[str, str] = {}
