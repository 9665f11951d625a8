"""Value statistics kept on a tensor's device until flush: counted by the device into
preallocated slots or in batches, copied to the host once per flush.

A device run must not wait for the device per op, so a state's (nnz, is01) cannot be read when
it is described. The device counts them and the flush copies the counts to the host, one
transfer per buffer (into pinned memory, asynchronously, where the device is CUDA), then reads
them. Per state, what costs the host time is the number of torch calls it launches, so:

* A small state (at most BATCHED_ELEMENTS elements: most of a step's states, and every one of
  a loop of tiny ops) is copied as it is now (one call: the tensor may change in place later)
  into its device's open batch. A full batch counts all its copies at once: one concatenation,
  and for `!= 0` and `== 1` a running sum read at each copy's end (Batch.count), a few calls for
  thousands of states. What it holds is bounded: BATCH_ELEMENTS elements of copies, then two
  int64 counts per state until the flush.
* A larger state is counted in place, into two float64 slots of a chunk of its device's slot
  buffer (exact to 2**53 elements), by STATISTIC_KERNELS: a bool tensor's nnz is its sum, one
  pass, its ones its nnz; a floating or complex tensor's nnz its L0 norm, one reduction with no
  temporary (NaN counts, -0.0 does not, as the CPU scan); an integer tensor's `t != 0` summed.
  The ones (is01 is ones == nnz) take `t == 1`, a bool temporary of t's size the allocator
  reuses at once: eager torch has no reduction that counts ones without one (a fused kernel
  would: docs/performance.md). Chunks are reused after each flush.

A CPU tensor on this path (defer_statistics=True) is counted by the CPU's own kernel where the
fast path `native_statistics` is on: the compiled one-pass scan the CPU path uses (the
registry's pend_row chooses it), its numbers ready at once, as a CPU kernel's are. torch's CPU
reductions are 50 times slower than it on mixed values and would measure the CPU's arithmetic,
not this path's.
With the fast path off a CPU tensor takes the kernels above, exactly as a CUDA tensor does
(tests/test_device_path.py runs both ways).

`peak_bytes` reports the most the slots and a batch's copies held at once.
"""

from __future__ import annotations

import torch

# Slots per buffer chunk (float64): 64 KiB each. A run holds as many chunks as the most states
# pending between two flushes need (flush_events bounds them) and reuses them after each flush.
CHUNK_SLOTS = 8192
# States of at most this many elements are copied into a batch and counted with the batch's
# others (one copy per state instead of three reductions); a batch is counted once it holds
# BATCH_ELEMENTS elements (2 MiB of float64 copies at most) or BATCH_TENSORS states.
BATCHED_ELEMENTS = 4096
BATCH_ELEMENTS = 1 << 18
BATCH_TENSORS = 4096


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
    counts will be (a slot pair, or a position in a batch's results), then the numbers."""

    __slots__ = ("nnz", "is01", "device", "slot", "counts_ones", "batch")
    nnz: int | None
    is01: bool | None
    device: torch.device | None  # None once resolved

    def __init__(self, device: torch.device, slot: int, counts_ones: bool, batch: Batch | None = None) -> None:
        self.nnz = None
        self.is01 = None
        self.device, self.slot, self.counts_ones, self.batch = device, slot, counts_ones, batch

    def resolve(self, host: list[float]) -> None:
        if self.batch is not None:
            nnz, ones = self.batch.host[0][self.slot], self.batch.host[1][self.slot]
        else:
            nnz = int(host[self.slot])
            ones = int(host[self.slot + 1]) if self.counts_ones else nnz
        self.nnz, self.is01 = nnz, ones == nnz
        self.device = self.batch = None


class Batch:
    """Small states' values, copied as they are when described, counted together: their
    copies until counted, then a [2, n] tensor of (nnz, ones) on the device, then on the host."""

    __slots__ = ("copies", "elements", "counts", "host")
    counts: torch.Tensor  # set once counted (count)
    host: list[list[int]]  # set once fetched (StatisticSlots.fetch)

    def __init__(self) -> None:
        self.copies: list[torch.Tensor] = []
        self.elements = 0

    def count(self) -> None:
        """One pass over all copies: a running sum of each mask, read at the copies' ends.
        torch.cat promotes to a dtype every copy's values keep their zero- and one-ness in
        (a float as wide as the widest, an integer wide enough)."""
        lengths = torch.tensor([c.numel() for c in self.copies], device=self.copies[0].device)
        values = torch.cat([c.reshape(-1) for c in self.copies])
        ends = lengths.cumsum(0)
        starts = ends - lengths
        sums = [torch.nn.functional.pad(mask.cumsum(0), (1, 0)) for mask in (values != 0, values == 1)]
        self.counts = torch.stack([s[ends] - s[starts] for s in sums])
        self.copies = []


class StatisticSlots:
    """The preallocated slot buffers and the batches of every device a recording met, and
    their use since the last flush."""

    def __init__(self) -> None:
        self.chunks: dict[torch.device, list[torch.Tensor]] = {}
        self.used: dict[torch.device, int] = {}  # slots given since the last flush, per device
        self.open_batches: dict[torch.device, Batch] = {}  # taking copies
        self.batches: list[Batch] = []  # counted or taking, fetched at the next flush
        self.peak_bytes = 0  # the most the slots and the batches' copies held at once

    def take(self, values: torch.Tensor) -> PendingStats:
        """Queue the counts of `values` (plain values: no quantized tensor), no wait for the
        device: a small tensor's copied into its device's open batch, a larger one's counted in
        place into two slots."""
        numel = values.numel()
        if numel <= BATCHED_ELEMENTS and not values.is_complex():
            return self._batched(values, numel)
        nnz_kernel, counts_ones = STATISTIC_KERNELS[_dtype_class(values.dtype)]
        device = values.device
        chunk, offset, slot = self._reserve(device)
        nnz_kernel(values, chunk[offset])
        if counts_ones:
            _ones(values, chunk[offset + 1])
        return PendingStats(device, slot, counts_ones)

    def _batched(self, values: torch.Tensor, numel: int) -> PendingStats:
        device = values.device
        batch = self.open_batches.get(device)
        if batch is None:
            batch = self.open_batches[device] = Batch()
            self.batches.append(batch)
        batch.copies.append(values.clone())  # the values now: the tensor may change in place later
        batch.elements += numel
        stats = PendingStats(device, len(batch.copies) - 1, True, batch)
        if batch.elements >= BATCH_ELEMENTS or len(batch.copies) >= BATCH_TENSORS:
            self._held(batch.elements)
            batch.count()
            del self.open_batches[device]
        return stats

    def _held(self, batch_elements: int) -> None:
        slots = sum(len(c) for c in self.chunks.values()) * CHUNK_SLOTS * 8
        self.peak_bytes = max(self.peak_bytes, slots + 8 * batch_elements)

    def _reserve(self, device: torch.device) -> tuple[torch.Tensor, int, int]:
        slot = self.used.get(device, 0)
        chunks = self.chunks.setdefault(device, [])
        index, offset = divmod(slot, CHUNK_SLOTS)
        if index == len(chunks):
            chunks.append(torch.empty(CHUNK_SLOTS, dtype=torch.float64, device=device))
            self._held(0)
        self.used[device] = slot + 2
        return chunks[index], offset, slot

    def discard(self) -> None:
        """Forget what was queued since the last flush (no row reads it)."""
        self.used.clear()
        self.open_batches.clear()
        self.batches = []

    def fetch(self) -> dict[torch.device, list[float]]:
        """Every device's used slots on the host, one transfer per chunk in use and per batch,
        each batch's counts on it (Batch.host); the slots free again, the batches gone."""
        for batch in self.open_batches.values():
            self._held(batch.elements)
            batch.count()
        self.open_batches.clear()
        fetched, copies = {}, []
        for device, used in self.used.items():
            parts = []
            for index, chunk in enumerate(self.chunks[device][:(used + CHUNK_SLOTS - 1) // CHUNK_SLOTS]):
                parts.append(_to_host(chunk[:min(CHUNK_SLOTS, used - index * CHUNK_SLOTS)]))
            copies.append((device, parts))
        batch_parts = [_to_host(batch.counts) for batch in self.batches]
        for device in {*self.used, *(b.counts.device for b in self.batches)}:
            if device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()  # the copies above were queued
        for device, parts in copies:
            fetched[device] = [v for part in parts for v in part.tolist()]
        for batch, part in zip(self.batches, batch_parts):
            batch.host = part.tolist()
        self.used.clear()
        self.batches = []
        return fetched


def _to_host(part: torch.Tensor) -> torch.Tensor:
    if part.device.type != "cuda":
        return part.cpu()
    host = torch.empty(part.shape, dtype=part.dtype, pin_memory=True)
    host.copy_(part, non_blocking=True)
    return host
