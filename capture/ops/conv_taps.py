"""Spike-tap counts for convolutions without running a convolution.

SpikingJelly 2.0.0 counts, for a conv whose input x is binary, how many (spike, weight)
pairs fire: it runs the conv again with an all-ones kernel and sums the result. That doubles
the cost of every conv. The same number factorises over the spatial dimensions:

    V = (C_out / g) * sum_p S(p) * prod_d cov_d(p_d),   S(p) = sum_{n,c} x[n, c, p]

Why: an all-ones kernel makes every (output, tap) pair that reads input position p
contribute exactly 1 per spike at p, and a conv's read pattern along one dimension depends
only on that dimension's geometry, so the number of pairs reading p is the product of the
per-dimension counts cov_d (and each spike feeds C_out/g output channels of its group).

Normal conv: cov_d(i) = #{(o, k) : s*o + d*k - pad = i, 0 <= o < O, 0 <= k < K}.
Transposed:  cov_d(i) = #{k : 0 <= s*i + d*k - pad < O}, O including output_padding.

Geometry arguments come in every form aten.convolution carries: one value per spatial dim,
a one-element list meaning the same value for every dim (`F.conv2d(x, w, stride=[2])`,
`padding="valid"` becomes `padding=[0]`), a bare int, or an empty list, which means the
default (no padding, unit stride and dilation). `geometry` expands them all.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

__all__ = [
    "geometry",
    "coverage_vector",
    "coverage_map",
    "conv_spike_taps",
    "spikingjelly_conv_value",
    "conv_both_binary_sum",
]


def _no_python_dispatch():
    # Counting must be invisible to the capture's own TorchDispatchMode (and to any other
    # mode stacked on it), exactly as SpikingJelly's counters hide their helper convs.
    return torch._C._ExcludeDispatchKeyGuard(
        torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
    )


def _ints(value, n: int, default: int = 0) -> tuple[int, ...]:
    """`value` as n ints: an int or a one-element list is repeated, [] is the default."""
    if isinstance(value, int):
        return (int(value),) * n
    out = tuple(int(v) for v in value)
    if len(out) == n:
        return out
    if len(out) == 1:
        return out * n
    if not out:
        return (default,) * n
    raise ValueError(f"expected 1 or {n} values, got {out!r}")


def geometry(spatial_dims: int, stride, padding, dilation, output_padding) -> tuple[tuple[int, ...], ...]:
    """(stride, padding, dilation, output_padding), each one int per spatial dim."""
    n = spatial_dims
    return _ints(stride, n, 1), _ints(padding, n, 0), _ints(dilation, n, 1), _ints(output_padding, n, 0)


@functools.lru_cache(maxsize=1024)
def coverage_vector(
    in_size: int,
    kernel: int,
    stride: int,
    padding: int,
    dilation: int,
    transposed: bool,
    output_padding: int = 0,
) -> tuple[int, ...]:
    """How many (output, tap) pairs read each of the in_size input positions of one dim."""
    cov = [0] * in_size
    if transposed:
        out_size = (in_size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
        if out_size <= 0:
            raise ValueError(f"transposed conv output size {out_size} is not positive")
        for i in range(in_size):
            cov[i] = sum(
                1 for k in range(kernel) if 0 <= stride * i + dilation * k - padding < out_size
            )
    else:
        out_size = (in_size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
        if out_size <= 0:
            raise ValueError(f"conv output size {out_size} is not positive")
        for o in range(out_size):
            for k in range(kernel):
                i = stride * o + dilation * k - padding
                if 0 <= i < in_size:  # taps landing in the zero padding read no spike
                    cov[i] += 1
    return tuple(cov)


@functools.lru_cache(maxsize=512)
def _cached_map(spatial_in, kernel, stride, padding, dilation, transposed, output_padding, device):
    # Built once per geometry, so the guards are taken here, not on every call (where they
    # would cost as much as the taps' sum). A map first built under inference_mode would be an inference
    # tensor; it is kept ordinary.
    with _no_python_dispatch(), torch.no_grad(), torch.inference_mode(False):
        return _build_map(spatial_in, kernel, stride, padding, dilation, transposed, output_padding, device)


def _build_map(spatial_in, kernel, stride, padding, dilation, transposed, output_padding, device):
    if device.type != "cpu":
        # One host->device copy per geometry; later calls reuse it, so no per-call transfer.
        cpu = _cached_map(spatial_in, kernel, stride, padding, dilation, transposed,
                          output_padding, torch.device("cpu"))
        return cpu.to(device)
    cov = None
    for dim, size in enumerate(spatial_in):
        vec = torch.tensor(
            coverage_vector(size, kernel[dim], stride[dim], padding[dim], dilation[dim],
                            transposed, output_padding[dim]),
            dtype=torch.float64,
        )
        cov = vec if cov is None else cov.unsqueeze(-1) * vec
    return cov


def coverage_map(spatial_in: Sequence[int], kernel: Sequence[int], stride, padding, dilation,
                 transposed: bool, output_padding=0, device=None) -> torch.Tensor:
    """float64 tensor of shape spatial_in: the outer product of the per-dim coverage vectors.

    The result is cached and shared between callers: treat it as read-only.
    """
    n = len(spatial_in)
    # aten ignores output_padding for normal convs; zeroing it keeps the cache tight.
    outpad = _ints(output_padding, n) if transposed else (0,) * n
    key = (tuple(int(s) for s in spatial_in), _ints(kernel, n), _ints(stride, n, 1),
           _ints(padding, n, 0), _ints(dilation, n, 1), bool(transposed), outpad)
    return _cached_map(*key, torch.device("cpu" if device is None else device))


def conv_spike_taps(x: torch.Tensor, weight_shape: Sequence[int], stride, padding, dilation,
                    transposed: bool, output_padding, groups: int) -> torch.Tensor:
    """0-dim float64 tensor on x.device: sum_p S(p) * cov(p), without the C_out/g factor.

    x must be binary (any dtype) and batched (N, C, *spatial), as aten.convolution sees it.
    Stays on device: the caller decides when (if ever) to synchronise.
    """
    kernel = tuple(int(k) for k in weight_shape[2:])
    if x.dim() != len(kernel) + 2:
        raise ValueError(f"input of shape {tuple(x.shape)} does not match kernel {kernel}")
    # groups is unused on purpose: whatever the grouping, a spike at p meets exactly one
    # group's kernel taps, so the per-position count is cov(p); groups only enters via C_out/g.
    cov = coverage_map(tuple(x.shape[2:]), kernel, stride, padding, dilation, transposed,
                       output_padding, device=x.device)
    with _no_python_dispatch(), torch.no_grad():
        spikes = x.sum(dim=(0, 1), dtype=torch.float64)
        return (spikes * cov).sum()


def spikingjelly_conv_value(taps: int, weight_shape: Sequence[int], transposed: bool,
                            groups: int) -> int:
    """Scale taps by the output channels per group, giving SpikingJelly's count."""
    # Transposed weights are (C_in, C_out/g, *k); normal ones are (C_out, C_in/g, *k).
    per_group_out = int(weight_shape[1]) if transposed else int(weight_shape[0]) // groups
    return int(taps) * per_group_out


def conv_both_binary_sum(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation,
                         transposed: bool, output_padding, groups: int) -> torch.Tensor:
    """0-dim float64 on x.device: SpikingJelly's count when x and w are both binary."""
    # No factorisation here: zero weights drop taps, so the real conv is the honest answer.
    # Full per-dim lists: aten itself refuses some forms we accept (an empty list, an int).
    stride, padding, dilation, output_padding = geometry(w.dim() - 2, stride, padding, dilation, output_padding)
    with _no_python_dispatch(), torch.no_grad():
        out = torch.ops.aten.convolution.default(
            x.double(), w.double(), None, list(stride), list(padding), list(dilation),
            bool(transposed), list(output_padding), int(groups),
        )
        return out.sum(dtype=torch.float64)
