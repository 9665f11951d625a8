"""What reads torch tensors of the compiled scans (capture/native/scan/): each dtype's bit format,
a CPU tensor's one-pass statistics, and the sharing of large scans among torch's threads
(capture/native/__init__.py says what each computes)."""

from __future__ import annotations

from typing import NamedTuple

import torch

try:  # the extension itself, not through the package (which loads this module at first use)
    import spiketrace.capture.native._native as _native
except ImportError:
    _native = None

AVAILABLE = _native is not None


class BitFormat(NamedTuple):
    """How a dtype's elements read as bits: the compiled record reads these fields by position
    (its BIT_FORMAT_FIELDS, which tests/test_native_layout.py holds equal to these)."""

    element_size: int
    zero_mask: int  # the bits that make a value non-zero (a float's sign bit left out: -0.0 is zero)
    one_bits: int  # the bit pattern of 1
    binary_type: bool  # 0/1 by its type: a bool is True or False whatever byte holds it, so only its non-zeros count


BIT_FORMATS = {
    torch.float32: BitFormat(4, 0x7FFF_FFFF, 0x3F80_0000, False),
    torch.float64: BitFormat(8, 0x7FFF_FFFF_FFFF_FFFF, 0x3FF0_0000_0000_0000, False),
    torch.float16: BitFormat(2, 0x7FFF, 0x3C00, False),
    torch.bfloat16: BitFormat(2, 0x7FFF, 0x3F80, False),
    torch.bool: BitFormat(1, 0xFF, 1, True),
    torch.uint8: BitFormat(1, 0xFF, 1, False),
    torch.int8: BitFormat(1, 0xFF, 1, False),
    torch.int16: BitFormat(2, 0xFFFF, 1, False),
    torch.int32: BitFormat(4, 0xFFFF_FFFF, 1, False),
    torch.int64: BitFormat(8, 0xFFFF_FFFF_FFFF_FFFF, 1, False),
}
for _name in ("uint16", "uint32", "uint64"):  # torch >= 2.3
    _dtype = getattr(torch, _name, None)
    if _dtype is not None:
        _size = _dtype.itemsize
        BIT_FORMATS[_dtype] = BitFormat(_size, (1 << (8 * _size)) - 1, 1, False)


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
