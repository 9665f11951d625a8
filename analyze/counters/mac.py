"""MACs, as SpikingJelly 2.0.0's MACCounter counts them: a product with a binary (spike)
operand costs no multiplication, so it counts 0 MACs."""

from __future__ import annotations

from analyze.counters.sql import arg

_MM = "CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a0_shape[1] * a0_shape[2] * a1_shape[2] END"
_ADDMM = "CASE WHEN a1_is01 OR a2_is01 THEN 0 ELSE a1_shape[1] * a1_shape[2] * a2_shape[2] END"
_BMM = "CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a0_shape[1] * a0_shape[2] * a0_shape[3] * a1_shape[3] END"
_BADDBMM = "CASE WHEN a1_is01 OR a2_is01 THEN 0 ELSE a1_shape[1] * a1_shape[2] * a1_shape[3] * a2_shape[3] END"
_CONV = (
    f"CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE a1_shape[2] * prod(a1_shape[3:])"
    f" * CASE WHEN {arg(6, 'BOOLEAN')} THEN prod(a0_shape[3:]) ELSE prod(o0_shape[3:]) END"
    f" * a1_shape[1] * a0_shape[1] END"
)
_BATCH_NORM = (
    f"(CASE WHEN a1_present THEN a0_numel ELSE 0 END"
    f" + CASE WHEN {arg(5, 'BOOLEAN')} AND a3_present THEN 2 * a0_shape[2] ELSE 0 END)"
)

RULES: dict[str, str] = {
    "aten.mm.default": _MM,
    "aten.addmm.default": _ADDMM,
    "aten.bmm.default": _BMM,
    "aten.baddbmm.default": _BADDBMM,
    "aten.convolution.default": _CONV,
    "aten.native_batch_norm.default": _BATCH_NORM,
}
SPIKINGJELLY: dict[str, str | None] = {}
SPIKINGJELLY_ABORTS: dict[str, str] = {}
