"""convolution_backward's products: the MAC, AC and SynOp rules (beyond SpikingJelly, whose
MAC, AC and SynOp counters have no rule for it; its FLOP rule is in flop.py).

convolution_backward(grad_out a0, x a1, w a2, bias_sizes, stride, padding, dilation, transposed,
output_padding, groups, output_mask) -> (grad_x, grad_w, grad_b). Its grad_x (output_mask[0])
and grad_w (output_mask[1]) each form every product the forward conv formed, one operand
replaced by grad_out:
* grad_x multiplies grad_out by w, grad_w multiplies x by grad_out: P products each, P = N *
  C_out * C_in/groups * prod(K) * prod(spatial), spatial the output's of a plain conv (grad_out's)
  or the input's of a transposed one (x's), as the forward conv's MAC rule counts them;
* as there, a product with a binary operand costs no multiplication but an accumulate per
  nonzero: a binary w gives grad_x nnz(w) * N * prod(spatial) ACs (the forward's rule for a
  binary w). A binary x (spikes) gives grad_w the same products the forward conv had with
  x's spikes, its AC count: conv_spike_taps * C_out/groups, the statistic capture takes for
  this op too from schema 1.5 (an older trace: unknown, NULL, reported). A binary grad_out with
  a nonzero, which a loss's gradient rarely is, leaves them unknown;
* grad_b (output_mask[2], with a bias) sums grad_out over batch and positions: C_out * (N *
  prod(spatial) - 1) accumulates, as AC counts a sum (and FLOP this term), but no synaptic op.
"""

from __future__ import annotations

from spiketrace.analyze.counters.sql import arg, arg_is_null, arg_item, values_known

OP = "aten.convolution_backward.default"
_TRANSPOSED = arg(7, "BOOLEAN")
GRAD_X, GRAD_W = arg_item(10, 0), arg_item(10, 1)
_SPATIAL = f"(CASE WHEN {_TRANSPOSED} THEN prod(a1_shape[3:]) ELSE prod(a0_shape[3:]) END)"
# w is (C_out, C_in/g, K) for a plain conv, (C_in, C_out/g, K) for a transposed one: either way
# w.shape[0] * w.shape[1] * prod(K) products per position and sample.
PRODUCTS = f"(a0_shape[1] * a2_shape[1] * a2_shape[2] * prod(a2_shape[3:]) * {_SPATIAL})"


def _part(mask: str, slots: tuple[str, str], rule: str) -> str:
    """One gradient's count: 0 when not asked for, NULL where its operands' values are unknown."""
    return f"CASE WHEN {mask} THEN {values_known(rule, *slots)} ELSE 0 END"


def _no_spike(slot: str) -> str:
    return f"({slot}_is01 AND {slot}_nnz = 0)"


MAC = (f"({_part(GRAD_X, ('a0', 'a2'), f'CASE WHEN a0_is01 OR a2_is01 THEN 0 ELSE {PRODUCTS} END')}"
       f" + {_part(GRAD_W, ('a0', 'a1'), f'CASE WHEN a0_is01 OR a1_is01 THEN 0 ELSE {PRODUCTS} END')})")
_AC_GRAD_X = (f"CASE WHEN {_no_spike('a0')} OR {_no_spike('a2')} THEN 0 WHEN a0_is01 THEN NULL"
              f" WHEN a2_is01 THEN a2_nnz * a0_shape[1] * {_SPATIAL} ELSE 0 END")
_GROUPS = arg(9)
# over spikes, the forward's accumulates: conv_spike_taps of x (taken for this op from schema
# 1.5; NULL in an older trace) times C_out/groups, w.shape[1] when transposed
_AC_GRAD_W = (f"CASE WHEN {_no_spike('a0')} OR {_no_spike('a1')} THEN 0 WHEN a0_is01 THEN NULL"
              f" WHEN a1_is01 THEN CAST(stat_conv_spike_taps AS BIGINT)"
              f" * CASE WHEN {_TRANSPOSED} THEN a2_shape[2] ELSE a2_shape[1] // {_GROUPS} END ELSE 0 END")
SYNOP = f"({_part(GRAD_X, ('a0', 'a2'), _AC_GRAD_X)} + {_part(GRAD_W, ('a0', 'a1'), _AC_GRAD_W)})"
_GRAD_B = f"CASE WHEN {arg_item(10, 2)} AND NOT {arg_is_null(3)} THEN a0_numel - a0_shape[2] ELSE 0 END"
AC = f"({SYNOP} + {_GRAD_B})"
