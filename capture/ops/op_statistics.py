"""The per-op activity scalars of spiketrace.schemas.statistics.OP_STATISTICS: one function per statistic.

Each function is pure: (args, out) -> a 0-dim tensor on the op's device (fetched at flush
time) or a Python number. The condition column of the table decides when a statistic is
taken; on CPU the operands' 0/1-ness is known at once, elsewhere a cheap statistic is taken
unconditionally rather than waiting on the device (the analysis reads it only where the
condition holds), and the costly both-binary convolution waits on its weight only.
The NeuroBench pair counts memoise a weight's nonzero counts per parameter version
(_nonzero_counts): the same value, computed once per optimizer step instead of per call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch

from spiketrace.capture.native import BIT_FORMATS, _native, scan_stats
from spiketrace.capture.ops import conv_taps
from spiketrace.capture.ops.shared_operands import SHARED, operand_stats

# The pair count and the ternary check in compiled passes (capture/native/scan/pairs.c,
# capture/native/scan/ternary.c); None without the extension.
_compiled_pairs = getattr(_native, "nonzero_pairs", None)
_compiled_ternary = getattr(_native, "ternary", None)
_compiled_counts = getattr(_native, "nonzero_counts", None)


def _compiled_format(t: torch.Tensor, kernel) -> tuple | None:
    """t's bit format (BIT_FORMATS) where `kernel` may read its memory: the
    kernel built, the fast path on, a CPU strided tensor of a known dtype; else None."""
    if kernel is None or not SHARED.get("compiled", True) or not t.is_cpu \
            or t.layout is not torch.strided or t.is_meta:
        return None
    return BIT_FORMATS.get(t.dtype)


def _conv_geometry(args):
    """(x, w, stride, padding, dilation, transposed, output_padding, groups) of
    aten.convolution or of its convolution_backward, or of an undecomposed aten.conv1d/2d/3d (.default or .padding: input,
    weight, bias, stride, padding, dilation, groups, trailing defaults omitted), as the
    aten.convolution it decomposes into sees them: x batched, a string padding applied."""
    if len(args) == 9 and isinstance(args[6], bool):  # aten.convolution: every argument given
        x, w, _bias, stride, padding, dilation, transposed, output_padding, groups = args
    elif len(args) == 11 and isinstance(args[7], bool):  # convolution_backward: grad_out first, the mask last
        _grad_out, x, w, _bias_sizes, stride, padding, dilation, transposed, output_padding, groups, _mask = args
    else:
        x, w = args[0], args[1]
        given = tuple(args[3:7])
        stride, padding, dilation, groups = given + (1, 0, 1, 1)[len(given):]
        transposed, output_padding = False, 0
        if x.dim() == w.dim() - 1:  # unbatched: conv{n}d adds the batch dim
            x = x.unsqueeze(0)
        if isinstance(padding, str):
            x, padding = _string_padding(x, w, padding, dilation)
    # Any form aten carries (an int, one value for every dim, []) becomes one int per dim.
    stride, padding, dilation, output_padding = conv_taps.geometry(w.dim() - 2, stride, padding, dilation, output_padding)
    return x, w, stride, padding, dilation, bool(transposed), output_padding, int(groups)


def _string_padding(x, w, padding: str, dilation):
    """(x, padding) for padding='valid' (none) or 'same' (dilation * (k - 1) in all per dim, the
    extra one on the right, as torch pads): x padded with zeros when left and right differ."""
    if padding == "valid":
        return x, 0
    if padding != "same":
        raise ValueError(f"unknown conv padding {padding!r}")
    kernel = tuple(int(k) for k in w.shape[2:])
    _, _, dilation, _ = conv_taps.geometry(len(kernel), 1, 0, dilation, 0)
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    if all(total % 2 == 0 for total in totals):
        return x, [total // 2 for total in totals]
    pads = []  # constant_pad_nd's order: the last dim first, (left, right) each
    for total in reversed(totals):
        pads += [total // 2, total - total // 2]
    return torch.constant_pad_nd(x, pads, 0.0), 0


def conv_spike_taps(args, out):
    # conv_taps.conv_spike_taps's sum_p S(p) * cov(p), S counted as the nonzeros of x over
    # batch and channels (S itself for the binary x the statistic is read for): the map that
    # conv_nonzero_pairs of the same call needs too, so it is counted once (_input_taps).
    x, w, stride, padding, dilation, transposed, output_padding, groups = _conv_geometry(args)
    return _input_taps(x, w, stride, padding, dilation, transposed, output_padding)


def conv_both_binary_sum(args, out):
    x, w, stride, padding, dilation, transposed, output_padding, groups = _conv_geometry(args)
    return conv_taps.conv_both_binary_sum(x, w, stride, padding, dilation, transposed, output_padding, groups)


# The largest K for which a product of 0/1 operands is exact in the output's dtype: every
# partial sum an integer no larger than K (float32's 24-bit significand, float64's 53).
_EXACT_COUNTS = {torch.float32: 2**24, torch.float64: 2**53}


def mm_out_sum(args, out):
    """out.sum(dtype=float64), as SpikingJelly sums the product of two 0/1 operands. On CPU in
    float32 or float64 (K small enough, _EXACT_COUNTS) each output element is the exact count
    of k with x[b, i, k] = y[b, k, j] = 1, so the sum is the pair count mm_nonzero_pairs takes
    of the same call (counted once for both: the inputs, not the larger B x M x N output)."""
    x, y = args[0], args[1]
    limit = _EXACT_COUNTS.get(out.dtype)
    if limit is not None and out.is_cpu and SHARED.get("binary", ())[:2] == (True, True) \
            and x.dtype == y.dtype == out.dtype and x.shape[-1] <= limit:
        return _gemm_pairs(x, y)
    return out.sum(dtype=torch.float64)


def marginal_dot(args, out):
    # sum(x @ y) == sum_k colsum(x)[k] * rowsum(y)[k], per batch for baddbmm; exact in float64.
    x, y = args[1].double(), args[2].double()
    return (x.sum(dim=-2) * y.sum(dim=-1)).sum()


def linear_marginal_dot(args, out):
    # sum(x @ w.T) == sum_k colsum(x)[k] * colsum(w)[k], x of any leading dims; exact in float64.
    x, w = args[0].double(), args[1].double()
    return (x.reshape(-1, x.shape[-1]).sum(dim=0) * w.sum(dim=0)).sum()


# -- NeuroBench (analyze/counters/neurobench.py) -------------------------------------------
# A weight's nonzero counts are a fact of its version: kept per parameter version, so that a
# weight read by every forward call is scanned once per optimizer step, not once per call.
# One entry per (parameter view, what), holding its latest version only: an entry per version
# would grow by every weight at every optimizer step, without bound over a long run.
_WEIGHT_COUNTS: dict[tuple, tuple[weakref.ref, int, torch.Tensor]] = {}


def _per_version(t: torch.Tensor, what, compute):
    """compute(t), remembered for the current version when t is a parameter or a view of one."""
    base = t._base if t._base is not None else t
    if not isinstance(base, torch.nn.Parameter) or base.is_inference():  # (no version counter)
        return compute(t)
    key = (id(base), t.storage_offset(), tuple(t.shape), tuple(t.stride()), what)
    kept = _WEIGHT_COUNTS.get(key)
    if kept is not None and kept[0]() is base and kept[1] == base._version:
        return kept[2]
    if len(_WEIGHT_COUNTS) > 1024:
        _WEIGHT_COUNTS.clear()
    value = compute(t)
    _WEIGHT_COUNTS[key] = (weakref.ref(base), base._version, value)
    return value


def _count_nonzero(t: torch.Tensor, dim) -> torch.Tensor:
    """(t != 0).sum(dim), exact: summed as float32 (far faster on CPU than count_nonzero along a
    dim) while a count cannot pass 2**24, else as float64."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    n = 1
    for d in dims:
        n *= t.shape[d]
    return (t != 0).to(torch.float32 if n < 2**24 else torch.float64).sum(dim=dims)


def _compiled_spatial_counts(x: torch.Tensor) -> torch.Tensor | None:
    """_spatial_counts in one compiled pass, where x's positions merge into one strided axis
    (contiguous and channels_last do); None elsewhere."""
    fmt = _compiled_format(x, _compiled_counts)
    if fmt is None or x.dim() < 3:
        return None
    assert _compiled_counts is not None  # a format: the kernel is built
    shape, strides = tuple(x.shape), tuple(x.stride())
    axes = [d for d in range(2, x.dim()) if shape[d] != 1]  # a size-1 axis is never stepped
    for outer, inner in zip(axes, axes[1:]):  # each position axis steps over the next one whole
        if strides[outer] != shape[inner] * strides[inner]:
            return None
    positions = 1
    for size in shape[2:]:
        positions *= size
    if positions == 0:  # no position to count (torch.frombuffer refuses an empty buffer)
        return torch.zeros(shape[2:], dtype=torch.float64)
    step = strides[axes[-1]] if axes else 1
    counts = _compiled_counts((x.data_ptr() if x.numel() else 0, fmt[0], fmt[1], (shape[0], shape[1], positions),
                               (strides[0], strides[1], step)))
    return torch.frombuffer(bytearray(counts), dtype=torch.int64).double().reshape(shape[2:])


def _spatial_counts(x: torch.Tensor) -> torch.Tensor:
    """nnz(x[:, :, p]) for every position p, in float64. Summing a 0/1 input is one pass with
    no comparison, far cheaper than counting; exact in float32 while no count can pass 2**24."""
    if SHARED.get("binary", (None,))[0] is True and x.shape[0] * x.shape[1] < 2**24:
        return x.sum(dim=(0, 1), dtype=torch.float32).double()  # torch's threaded sum: the fastest
    compiled = _compiled_spatial_counts(x)  # else one compiled pass instead of a compare, a cast and a sum
    return compiled if compiled is not None else _count_nonzero(x, (0, 1)).double()


def _input_taps(x: torch.Tensor, w: torch.Tensor, stride, padding, dilation, transposed, output_padding):
    """sum_p nnz(x[:, :, p]) * cov(p), float64 0-dim on x's device, once per op call."""
    taps = SHARED.get("input_taps")
    if taps is None:
        kernel = tuple(int(k) for k in w.shape[2:])
        if x.dim() != len(kernel) + 2:
            raise ValueError(f"input of shape {tuple(x.shape)} does not match kernel {kernel}")
        cov = conv_taps.coverage_map(tuple(x.shape[2:]), kernel, stride, padding, dilation, transposed,
                                     output_padding, device=x.device)
        taps = (_spatial_counts(x) * cov).sum()
        if "binary" in SHARED:  # within one op's statistics
            SHARED["input_taps"] = taps
    return taps


def _nonzero_counts(t: torch.Tensor, dim: int, binary: bool = False) -> torch.Tensor:
    """_count_nonzero(t, dim), once per parameter version. A 0/1 t is summed instead: one
    pass, no comparison, the same counts (exact in float32 while none can pass 2**24)."""
    if binary and t.shape[dim] < 2**24:
        return _per_version(t, dim, lambda v: v.sum(dim=dim, dtype=torch.float32))
    return _per_version(t, dim, lambda v: _count_nonzero(v, dim))


def _dense(w: torch.Tensor, known: tuple | None = None) -> bool:
    """Every weight nonzero: on CPU at once; on a device once per parameter version (one wait
    per optimizer step), any other device weight is taken as sparse (the general path).
    `known`: the weight's (nnz, is01) the record took of this very state, which says it
    without scanning the weights a second time."""
    if known is not None and known[0] is not None:
        return known[0] == w.numel()
    if not w.is_cpu and not isinstance(w._base if w._base is not None else w, torch.nn.Parameter):
        return False
    return _per_version(w, "dense", lambda v: _nonzero_total(v) == v.numel())


def _nonzero_total(t: torch.Tensor) -> int:
    """count_nonzero(t): on CPU by the compiled scan (the fast path native_operand_statistics),
    the same count; a weight's, once per optimizer step for each convolution."""
    stats = scan_stats(t) if _compiled_format(t, _native) is not None else None
    if stats is not None:
        return stats[0]
    return int(torch.count_nonzero(t))


def _as_batched(t: torch.Tensor) -> tuple | None:
    """(address, element size, nonzero mask, (B, rows, columns), strides) of a CPU strided 2-D
    or 3-D tensor of a known format, for the compiled pair count; None for anything else."""
    fmt = _compiled_format(t, _compiled_pairs)
    if fmt is None or t.dim() not in (2, 3):
        return None
    # The format's mask, whatever its 0/1-by-type flag: nonzero is nonzero (a negated view,
    # is_neg, holds the same nonzeros as its memory).
    shape, strides = tuple(t.shape), tuple(t.stride())
    if t.dim() == 2:
        shape, strides = (1, *shape), (0, *strides)
    return (t.data_ptr() if t.numel() else 0, fmt[0], fmt[1], shape, strides)


def _dense_operand_pairs(x: torch.Tensor, y: torch.Tensor) -> int | None:
    """The pair count read off the record's nnz where an operand is dense (every element
    nonzero, as its nnz of this very state says): each nonzero of the other then meets a whole
    row or column of it, sum_k nnz(x[b, :, k]) * N = nnz(x) * N with y [.., K, N] dense, and
    M * nnz(y) with x [.., M, K] dense. A Linear's dense weight on spikes, and every GEMM of
    analog activations, so need no pass over their operands; None where neither is known dense."""
    x_stats, y_stats = operand_stats(0), operand_stats(1)
    if x_stats is None or y_stats is None or not isinstance(x_stats[0], int) or not isinstance(y_stats[0], int):
        return None
    if y_stats[0] == y.numel():
        return x_stats[0] * y.shape[-1]
    if x_stats[0] == x.numel():
        return x.shape[-2] * y_stats[0]
    return None


def _gemm_pairs(x: torch.Tensor, y: torch.Tensor):
    # (nonzero x[b, i, k], nonzero y[b, k, j]) pairs: per k, nnz of x's column times nnz of y's row.
    # x and y are the op's statistic operands in order (spiketrace.schemas.statistics.OP_STATISTICS), so
    # the record's statistics of operands 0 and 1 are theirs (a reshape or transpose keeps them).
    # Counted once per op: mm_out_sum of 0/1 operands reads the same count.
    if "pairs" in SHARED:
        return SHARED["pairs"]
    pairs = _gemm_pairs_of(x, y)
    if "binary" in SHARED:  # inside one_op: the count belongs to this op's operands
        SHARED["pairs"] = pairs
    return pairs


def _gemm_pairs_of(x: torch.Tensor, y: torch.Tensor):
    pairs = _dense_operand_pairs(x, y)
    if pairs is not None:
        return pairs
    if x.dim() == y.dim():
        operands = (_as_batched(x), _as_batched(y))
        # (an operand the kernel reads implies the kernel); None past 2**64
        pairs = _compiled_pairs(*operands) if None not in operands and _compiled_pairs is not None else None
        if pairs is not None:
            return pairs  # an exact int: the counts are integers
    x_binary, y_binary = (*SHARED.get("binary", ()), None, None)[:2]
    return (_nonzero_counts(x, -2, x_binary is True).double() * _nonzero_counts(y, -1, y_binary is True).double()).sum()


def mm_nonzero_pairs(args, out):
    return _gemm_pairs(args[0], args[1])


def addmm_nonzero_pairs(args, out):
    return _gemm_pairs(args[1], args[2])


def linear_nonzero_pairs(args, out):
    x, w = args[0], args[1]
    return _gemm_pairs(x.reshape(-1, x.shape[-1]), w.t())


def conv_nonzero_pairs(args, out):
    """sum(conv(x != 0, w != 0)): with a dense weight the spike taps of x != 0 times
    C_out/groups (no conv); else one float64 conv of x != 0 with the weight's nonzero counts
    summed over each group's output channels (groups output channels, not C_out)."""
    x, w, stride, padding, dilation, transposed, output_padding, groups = _conv_geometry(args)
    if _dense(w, operand_stats(1)):  # conv_taps.conv_spike_taps of x != 0: sum_p nnz(x[:, :, p]) * cov(p)
        taps = _input_taps(x, w, stride, padding, dilation, transposed, output_padding)
        return taps * conv_taps.spikingjelly_conv_value(1, tuple(w.shape), transposed, groups)
    spikes = (x != 0).double()
    nonzero = (w != 0).double()
    if transposed:  # (C_in, C_out/g, *k): each input channel's taps summed over its outputs
        kernel = nonzero.sum(dim=1, keepdim=True)
    else:  # (C_out, C_in/g, *k) -> (g, C_in/g, *k)
        kernel = nonzero.reshape(groups, w.shape[0] // groups, *w.shape[1:]).sum(dim=1)
    summed = torch.ops.aten.convolution.default(spikes, kernel, None, list(stride), list(padding), list(dilation),
                                                transposed, list(output_padding), groups)
    return summed.sum(dtype=torch.float64)


def _ternary(x: torch.Tensor):
    if x.dtype == torch.bool or x.numel() == 0:
        return 1.0
    if x.is_cpu:
        fmt = _compiled_format(x, _compiled_ternary)
        if fmt is not None and _compiled_ternary is not None:  # a format: the kernel is built
            # -1 is all bits set in a signed integer; a float's -1 is its 1 under the sign mask
            minus_one = x.dtype.is_signed and not x.dtype.is_floating_point
            return float(_compiled_ternary(x.data_ptr(), fmt[0], fmt[1], fmt[2], minus_one, tuple(x.shape),
                                           tuple(x.stride())))
        head = x.reshape(-1)[:64]
        if not bool(((head == 0) | (head.abs() == 1)).all()):
            return 0.0  # most analog tensors: no scan
    return (torch.count_nonzero((x == 0) | (x.abs() == 1)) == x.numel()).double()


# Statistics that hold (value 1.0) without a scan when the op's first operand is known 0/1.
TERNARY_OF_FIRST_OPERAND = frozenset({"x_ternary", "addmm_x_ternary"})


def x_ternary(args, out):
    return _ternary(args[0])


def addmm_x_ternary(args, out):
    return _ternary(args[1])


STATISTIC_FUNCTIONS: dict[str, Callable] = {
    "conv_spike_taps": conv_spike_taps,
    "conv_both_binary_sum": conv_both_binary_sum,
    "mm_out_sum": mm_out_sum,
    "marginal_dot": marginal_dot,
    "linear_marginal_dot": linear_marginal_dot,
    "conv_nonzero_pairs": conv_nonzero_pairs,
    "mm_nonzero_pairs": mm_nonzero_pairs,
    "addmm_nonzero_pairs": addmm_nonzero_pairs,
    "linear_nonzero_pairs": linear_nonzero_pairs,
    "x_ternary": x_ternary,
    "addmm_x_ternary": addmm_x_ternary,
}

# Statistics too costly to take speculatively on an accelerator: their condition is checked
# first, even if that waits for the device (once per weight version for convolutions).
EXPENSIVE = frozenset({"conv_both_binary_sum"})
