"""Value statistics kept on a tensor's device until flush: written into slots of preallocated
device buffers, copied to the host once per flush.

A device run must not wait for the device per op, so a state's (nnz, is01) cannot be read when
it is described. Each is written by the device itself into two float64 slots of a buffer that
lives on that device (float64 counts are exact up to 2**53 elements), and the flush copies each
buffer's used slots to the host in one transfer (into pinned memory, asynchronously, where the
device is CUDA), then reads them. One 0-dim tensor per statistic, as before, cost an allocation
each and a `stack` of thousands of them at flush.

What each dtype's two counts cost (STATISTIC_KERNELS): a bool tensor's nnz is its sum, one pass
and its ones are its nnz (is01 by its type); a floating or complex tensor's nnz is its L0 norm,
one reduction with no temporary (NaN counts, -0.0 does not, as the CPU scan); an integer tensor's
needs `t != 0`. The ones (is01 is ones == nnz) take `t == 1`, a bool temporary of t's size that
the allocator reuses at once: eager torch has no reduction that counts ones without it (a fused
kernel would, see docs/performance.md). Those temporaries are freed when the op returns; what
pending statistics hold is the slots alone, 16 bytes per pending state, in chunks of CHUNK_SLOTS
that are reused after each flush (`peak_bytes` reports the most ever held).
"""

from __future__ import annotations

import torch

# Slots per buffer chunk (float64): 64 KiB each. A run holds as many chunks as the most states
# pending between two flushes need (flush_events bounds them) and reuses them after each flush.
CHUNK_SLOTS = 8192


def _nnz_sum(values: torch.Tensor, out: torch.Tensor) -> None:
    torch.sum(values, dim=None, dtype=torch.float64, out=out)


def _nnz_norm(values: torch.Tensor, out: torch.Tensor) -> None:
    kind = torch.complex128 if values.is_complex() else torch.float64
    torch.linalg.vector_norm(values, 0, dtype=kind, out=out)


def _nnz_compare(values: torch.Tensor, out: torch.Tensor) -> None:
    torch.sum(values != 0, dim=None, dtype=torch.float64, out=out)


def _ones(values: torch.Tensor, out: torch.Tensor) -> None:
    torch.sum(values == 1, dim=None, dtype=torch.float64, out=out)


# dtype class -> (the nnz kernel, whether its ones need their own count)
STATISTIC_KERNELS = {
    "bool": (_nnz_sum, False),
    "floating": (_nnz_norm, True),
    "complex": (_nnz_norm, True),
    "integer": (_nnz_compare, True),
}


def _dtype_class(dtype: torch.dtype) -> str:
    if dtype is torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "floating" if dtype.is_floating_point else "integer"


class PendingStats:
    """nnz/is01 of a state whose statistics stay on its device until the next flush: where its
    counts are (a device's slots), then the numbers once fetched."""

    __slots__ = ("nnz", "is01", "device", "slot", "counts_ones")

    def __init__(self, device: torch.device, slot: int, counts_ones: bool) -> None:
        self.nnz = None
        self.is01 = None
        self.device, self.slot, self.counts_ones = device, slot, counts_ones

    def resolve(self, host: list[float]) -> None:
        nnz = int(host[self.slot])
        self.nnz = nnz
        self.is01 = int(host[self.slot + 1]) == nnz if self.counts_ones else True
        self.device = None


class StatisticSlots:
    """The preallocated slot buffers of every device a recording met, and their use since the
    last flush."""

    def __init__(self) -> None:
        self.chunks: dict[torch.device, list[torch.Tensor]] = {}
        self.used: dict[torch.device, int] = {}  # slots given since the last flush, per device
        self.peak_bytes = 0

    def take(self, values: torch.Tensor) -> PendingStats:
        """Queue the counts of `values` (plain values: no quantized tensor) into two slots on
        its device; no wait for the device."""
        nnz_kernel, counts_ones = STATISTIC_KERNELS[_dtype_class(values.dtype)]
        device = values.device
        chunk, offset, slot = self._reserve(device)
        nnz_kernel(values, chunk[offset])
        if counts_ones:
            _ones(values, chunk[offset + 1])
        return PendingStats(device, slot, counts_ones)

    def _reserve(self, device: torch.device) -> tuple[torch.Tensor, int, int]:
        slot = self.used.get(device, 0)
        chunks = self.chunks.setdefault(device, [])
        index, offset = divmod(slot, CHUNK_SLOTS)
        if index == len(chunks):
            chunks.append(torch.empty(CHUNK_SLOTS, dtype=torch.float64, device=device))
            self.peak_bytes = max(self.peak_bytes, sum(len(c) for c in self.chunks.values()) * CHUNK_SLOTS * 8)
        self.used[device] = slot + 2
        return chunks[index], offset, slot

    def fetch(self) -> dict[torch.device, list[float]]:
        """Every device's used slots on the host, one transfer per chunk in use, and the slots
        free again."""
        fetched = {}
        for device, used in self.used.items():
            parts = []
            for index, chunk in enumerate(self.chunks[device][:(used + CHUNK_SLOTS - 1) // CHUNK_SLOTS]):
                part = chunk[:min(CHUNK_SLOTS, used - index * CHUNK_SLOTS)]
                parts.append(_to_host(part))
            if device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()  # the copies above were queued
            fetched[device] = [v for part in parts for v in part.tolist()]
        self.used.clear()
        return fetched


def _to_host(part: torch.Tensor) -> torch.Tensor:
    if part.device.type != "cuda":
        return part.cpu()
    host = torch.empty(part.shape, dtype=part.dtype, pin_memory=True)
    host.copy_(part, non_blocking=True)
    return host
