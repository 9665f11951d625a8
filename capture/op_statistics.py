"""The per-op activity scalars of schemas.statistics.OP_STATISTICS: one function per statistic.

Each function is pure: (args, out) -> a 0-dim tensor on the op's device (fetched at flush
time) or a Python number. The condition column of the table decides when a statistic is
taken; on CPU the operands' 0/1-ness is known at once, elsewhere a cheap statistic is taken
unconditionally rather than waiting on the device (the analysis reads it only where the
condition holds), and the costly both-binary convolution waits on its weight only.
"""

from __future__ import annotations

from typing import Callable

import torch

from capture import conv_taps


def _conv_geometry(args):
    x, w, _bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    # Any form aten carries (an int, one value for every dim, []) becomes one int per dim.
    stride, padding, dilation, output_padding = conv_taps.geometry(w.dim() - 2, stride, padding, dilation, output_padding)
    return x, w, stride, padding, dilation, bool(transposed), output_padding, int(groups)


def conv_spike_taps(args, out):
    x, w, stride, padding, dilation, transposed, output_padding, groups = _conv_geometry(args)
    return conv_taps.conv_spike_taps(x, tuple(w.shape), stride, padding, dilation, transposed, output_padding, groups)


def conv_both_binary_sum(args, out):
    x, w, stride, padding, dilation, transposed, output_padding, groups = _conv_geometry(args)
    return conv_taps.conv_both_binary_sum(x, w, stride, padding, dilation, transposed, output_padding, groups)


def mm_out_sum(args, out):
    return out.sum(dtype=torch.float64)


def marginal_dot(args, out):
    # sum(x @ y) == sum_k colsum(x)[k] * rowsum(y)[k], per batch for baddbmm; exact in float64.
    x, y = args[1].double(), args[2].double()
    return (x.sum(dim=-2) * y.sum(dim=-1)).sum()


STATISTIC_FUNCTIONS: dict[str, Callable] = {
    "conv_spike_taps": conv_spike_taps,
    "conv_both_binary_sum": conv_both_binary_sum,
    "mm_out_sum": mm_out_sum,
    "marginal_dot": marginal_dot,
}

# Statistics too costly to take speculatively on an accelerator: their condition is checked
# first, even if that waits for the device (once per weight version for convolutions).
EXPENSIVE = frozenset({"conv_both_binary_sum"})
