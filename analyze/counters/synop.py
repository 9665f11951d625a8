"""Synaptic operations, as SpikingJelly 2.0.0's SynOpCounter counts them: exactly the
accumulate (AC) rules of the synaptic ops (mm, addmm, bmm, baddbmm, convolution, and the
composite conv1d/2d/3d and linear when recorded whole)."""

from __future__ import annotations

from spiketrace.analyze.counters import conv_backward, fused_attention
from spiketrace.analyze.counters.ac import SYNAPTIC_RULES, UNDECOMPOSED_SYNAPTIC_RULES

# Beyond SpikingJelly, which has no rule for them: the composite ops recorded whole; attention's
# products and torch's fused transformer layers (their products' ACs; fused_attention.py); a
# conv's backward (its gradients' products' ACs; conv_backward.py).
EXTRA_RULES: dict[str, str] = {**UNDECOMPOSED_SYNAPTIC_RULES, **fused_attention.SYNOP,
                               conv_backward.OP: conv_backward.SYNOP}
RULES: dict[str, str] = {**SYNAPTIC_RULES, **EXTRA_RULES}
SPIKINGJELLY: dict[str, str | None] = {op: None for op in EXTRA_RULES}
SPIKINGJELLY_ABORTS: dict[str, str] = {}
