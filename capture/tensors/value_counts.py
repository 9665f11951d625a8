"""Exact value statistics of a CPU tensor: its non-zero count and whether it holds only 0 and 1.

Each is the cheapest exact pass for its size: a small tensor's values read
into Python, numpy's comparison over the tensor's memory (read through __array_interface__,
never `.numpy()` on the user's tensor, which would mark its storage non-resizable for good:
see capture/tensors/registry.py), or torch's kernels on a fresh tensor of ours for large ones.
"""

from __future__ import annotations

import warnings

import torch

from spiketrace.capture.native import scan_stats

# Below this many elements, reading the values into Python and counting beats two kernels.
SMALL_TENSOR = 256


try:  # numpy counts a bool array's ones faster than torch's CPU count_nonzero counts them
    import numpy
except ImportError:  # capture needs only torch; without numpy the torch kernels do the same job
    numpy = None  # type: ignore[assignment]  # the optional import's fallback


def _count_true(mask: torch.Tensor) -> int:
    """Number of True values of a bool tensor the capture created (never a user's: see
    the module docstring on `.numpy()`)."""
    if numpy is not None:
        try:
            return int(numpy.count_nonzero(mask.numpy()))
        except (RuntimeError, TypeError):  # a tensor subclass numpy cannot view
            pass
    return int(torch.count_nonzero(mask))


# numpy's type string of each dtype it can read as it is (bfloat16 and complex: torch counts).
_NUMPY_TYPESTRS = {} if numpy is None else {
    dtype: numpy.dtype(name).str for dtype, name in (
        (torch.float32, "float32"), (torch.float64, "float64"), (torch.float16, "float16"), (torch.int8, "int8"),
        (torch.uint8, "uint8"), (torch.int16, "int16"), (torch.int32, "int32"), (torch.int64, "int64"),
        (torch.bool, "bool"))
}


class _Memory:
    """A CPU tensor's elements as numpy reads them through __array_interface__: no `.numpy()`
    on the user's tensor (see the module docstring), no copy, read-only."""

    __slots__ = ("__array_interface__",)

    def __init__(self, t: torch.Tensor, typestr: str) -> None:
        size = t.element_size()
        self.__array_interface__ = {"version": 3, "typestr": typestr, "data": (t.data_ptr(), True),
                                    "shape": tuple(t.shape), "strides": tuple(s * size for s in t.stride())}


# Below this many elements numpy's single-threaded comparison beats torch's bool cast; above it
# the cast's threads win. Numpy also never waits behind torch's OpenMP pool on a busy machine.
NUMPY_COUNT_LIMIT = 1 << 19


def _memory(t: torch.Tensor):
    """The tensor's elements as a read-only numpy array over its memory, or None where numpy
    cannot read them: no numpy, a dtype numpy lacks, a negative view (its memory holds the
    negated values) or a tensor subclass without a data pointer of its own. Built once per
    tensor state: building the array costs as much as a comparison over a mid-sized tensor."""
    typestr = _NUMPY_TYPESTRS.get(t.dtype)
    if typestr is None or t.is_neg():
        return None
    try:
        return numpy.asarray(_Memory(t, typestr))
    except RuntimeError:
        return None


def _count_nonzero(t: torch.Tensor, memory=None) -> int:
    """Number of non-zero elements (NaN counts, -0.0 does not): numpy's one comparison pass
    over the tensor's memory (`memory`, from _memory) below NUMPY_COUNT_LIMIT elements, else
    a bool cast and count."""
    if memory is not None and memory.size < NUMPY_COUNT_LIMIT:
        return int(numpy.count_nonzero(memory != 0))
    return _count_true(t.bool())  # a fresh tensor of ours: one vectorised pass


def _count_bool(t: torch.Tensor) -> int:
    """Number of True values of a bool tensor: numpy counts its memory at any size (far
    faster than torch's count_nonzero on a comparison's output, such as the spikes `ge` gives
    a neuron), torch where numpy cannot read it."""
    memory = _memory(t)
    return int(numpy.count_nonzero(memory)) if memory is not None else int(torch.count_nonzero(t))


def _count_ones(t: torch.Tensor, memory=None) -> int:
    """Number of elements equal to 1: numpy's one comparison pass over the tensor's memory
    (`memory`, from _memory; cheaper than torch's subtract-and-cast), else torch counts."""
    if memory is not None:
        return int(numpy.count_nonzero(memory == 1))
    # x - 1 == 0 exactly when x == 1 (IEEE subtraction, and integers modulo their width); NaN -
    # 1 is NaN, non-zero. The subtraction and cast are faster than torch's comparison kernels.
    try:
        return t.numel() - _count_true(t.detach().sub(1).bool())  # detach: builds no autograd node
    except RuntimeError:  # a dtype without subtraction (uint16, uint32, ...)
        return int(torch.count_nonzero(t == 1))


def ignoring_warnings(function, *args):
    """function(*args) with warnings ignored: a statistic taken again after a warning torch
    raised inside it (the user's filter, e.g. `-W error`, made it an exception) is the same
    statistic, and the warning is not the capture's to raise nor a failure of it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args)


def readable(t: torch.Tensor) -> torch.Tensor:
    """A tensor of ours whose memory holds t's values as they read, for the two kinds whose
    memory does not: a quantized tensor's values are its dequantized ones (a stored integer q
    reads as (q - zero_point) * scale, zero exactly where q is the zero point, whatever the
    scheme), and a negative view's are its memory negated (torch cannot cast one to bool)."""
    return t.dequantize() if t.is_quantized else t.resolve_neg()


def immediate_stats(t: torch.Tensor) -> tuple[int, bool]:
    """(nnz, is01) of a CPU tensor; is01 == all((t == 0) | (t == 1)), False with NaN: the
    compiled one-pass scan where it was built (scan_stats), else python_stats."""
    stats = scan_stats(t)
    return python_stats(t) if stats is None else stats


def python_stats(t: torch.Tensor) -> tuple[int, bool]:
    """immediate_stats without the compiled scan: the cheapest exact pass per size in Python
    (the slow path of the fast path `native_statistics`)."""
    if t.is_quantized or t.is_neg():
        t = readable(t)
    numel = t.numel()
    if numel <= SMALL_TENSOR:
        dim = t.dim()  # 0-d and 1-d tensors convert without a reshape op (no dispatched op at all)
        values = t.tolist() if dim == 1 else [t.tolist()] if dim == 0 else t.reshape(-1).tolist()
        zeros = values.count(0)  # -0.0 == 0; NaN equals neither 0 nor 1
        return numel - zeros, zeros + values.count(1) == numel
    if t.dtype is torch.bool:
        return _count_bool(t), True
    # torch's count_nonzero on mixed values branches badly: see _count_nonzero
    memory = _memory(t)
    nnz = _count_nonzero(t, memory)
    if nnz == 0:
        return 0, True
    # The first element decides most non-binary tensors without a second pass (read from the
    # memory array: indexing the tensor would be a dispatched op, far dearer).
    first = memory[(0,) * memory.ndim] if memory is not None else t[(0,) * t.dim()].item()
    if first != 0 and first != 1:
        return nnz, False
    # Every value is 0 or 1 exactly when the non-zeros are all ones.
    return nnz, _count_ones(t, memory) == nnz
