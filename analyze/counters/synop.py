"""Synaptic operations, as SpikingJelly 2.0.0's SynOpCounter counts them: exactly the
accumulate (AC) rules of the synaptic ops (mm, addmm, bmm, baddbmm, convolution)."""

from __future__ import annotations

from analyze.counters.ac import SYNAPTIC_RULES

RULES: dict[str, str] = dict(SYNAPTIC_RULES)
SPIKINGJELLY: dict[str, str | None] = {}
SPIKINGJELLY_ABORTS: dict[str, str] = {}
