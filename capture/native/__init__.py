"""The compiled inner loops (capture/native/_native.c), where the install could build them.

The extension is optional (pyproject.toml): without a C compiler the install goes on, and
capture runs the Python paths, which record the same trace. `AVAILABLE` says which; the
manifest's settings name it (`native`), so a slow capture can be told from a slow machine.

`scan_stats(t)` is the one-pass value statistics of a CPU tensor: its elements' bit patterns
are compared with the format's zero (sign bit masked: -0.0 is zero, NaN is not) and one, so
the counts equal `(t != 0).sum()` and `(t == 1).sum()` for every value, NaN included. A large
tensor's scan is shared among the threads of the OpenMP runtime torch runs its kernels on
(capture/native/_native_parallel.c; the fast path `shared_scans`): the same counts, sooner.
"""

from __future__ import annotations

import torch

try:
    from spiketrace.capture.native import _native
except ImportError:  # built without a compiler (or from a source tree never installed)
    _native = None

AVAILABLE = _native is not None

# dtype -> (element size, mask of the bits that make a value non-zero, bit pattern of 1,
# 0/1 by its type: a bool is True or False whatever byte holds it, so only its non-zeros count).
BIT_FORMATS = {
    torch.float32: (4, 0x7FFF_FFFF, 0x3F80_0000, False),
    torch.float64: (8, 0x7FFF_FFFF_FFFF_FFFF, 0x3FF0_0000_0000_0000, False),
    torch.float16: (2, 0x7FFF, 0x3C00, False),
    torch.bfloat16: (2, 0x7FFF, 0x3F80, False),
    torch.bool: (1, 0xFF, 1, True),
    torch.uint8: (1, 0xFF, 1, False),
    torch.int8: (1, 0xFF, 1, False),
    torch.int16: (2, 0xFFFF, 1, False),
    torch.int32: (4, 0xFFFF_FFFF, 1, False),
    torch.int64: (8, 0xFFFF_FFFF_FFFF_FFFF, 1, False),
}
for _name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
    _dtype = getattr(torch, _name, None)
    if _dtype is not None:
        _size = _dtype.itemsize
        BIT_FORMATS[_dtype] = (_size, (1 << (8 * _size)) - 1, 1, False)


def scan_stats(t: torch.Tensor) -> tuple[int, bool] | None:
    """(nnz, is01) of a CPU strided tensor from one pass over its memory, or None where the
    extension is missing or the memory does not hold the values as they read (a format it
    does not know: complex, float8; a negative view, whose memory holds the negated values)."""
    bit_format = BIT_FORMATS.get(t.dtype) if AVAILABLE else None
    if bit_format is None or t.is_neg():
        return None
    size, zero_mask, one_bits, binary_type = bit_format
    nnz, ones = _native.scan(t.data_ptr(), size, zero_mask, one_bits, not binary_type, t.shape, t.stride())
    return nnz, binary_type or ones == nnz


def share_scans(shared: bool) -> tuple | None:
    """Let large scans run on torch's OpenMP threads (True) or keep every scan on the calling
    thread (False), for the Recorder that opens now; returns the settings to restore() after."""
    if not AVAILABLE:
        return None
    before = _native.parallel_scan()
    if not shared:
        _native.parallel_scan(max_threads=1)
    return before


def restore_scans(before: tuple | None) -> None:
    if before is not None:
        _native.parallel_scan(min_bytes=before[1], max_threads=before[2])


def scan_threads() -> int:
    """The threads a large scan gets now: torch's OpenMP threads where the runtime was found."""
    if not AVAILABLE:
        return 1
    found, _, most = _native.parallel_scan()
    return min(torch.get_num_threads(), most) if found else 1
