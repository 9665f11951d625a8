"""The device path's counting (capture/tensors/device_statistics.py), run on CPU with the kernels
a CUDA tensor takes: each state's (nnz, is01) equals the direct count, whatever its dtype, size,
layout or values, mixed in one batch as a step mixes them, and what pending statistics hold
stays bounded however many states are queued before a flush."""

from __future__ import annotations

import math

import torch

from spiketrace.capture.tensors.device_statistics import BATCH_ELEMENTS, BATCHED_ELEMENTS, CHUNK_SLOTS, StatisticSlots


def direct(t: torch.Tensor) -> tuple[int, bool]:
    """The definition: nonzero elements (NaN counts, -0.0 does not); 0/1 when every value is."""
    values = [complex(v) if t.is_complex() else float(v) for v in t.reshape(-1).tolist()]
    nnz = sum(1 for v in values if v != 0)
    return nnz, all(v == 0 or v == 1 for v in values)


def cases() -> list[torch.Tensor]:
    torch.manual_seed(0)
    spikes = (torch.rand(8, 9) > 0.5).float()
    big = torch.randn(BATCHED_ELEMENTS + 5)
    big[::3] = 0
    return [
        spikes, spikes.t(), spikes.bool(), spikes.to(torch.bfloat16), spikes.to(torch.float16), spikes.double(),
        spikes.to(torch.int8), spikes.long() * 70000, torch.tensor([0.0, -0.0, math.nan, 1.0, math.inf]),
        torch.tensor([1e-300, 1.0 + 1e-12], dtype=torch.float64),  # neither rounds to 0 or 1 in a batch
        torch.tensor(1.0), torch.tensor(0), torch.empty(0, 3), torch.tensor([1 + 0j, 0j, 1j]),
        torch.arange(-3, 4, dtype=torch.int32), spikes[:, ::2], big, (big != 0).float(), big > 0,
        torch.zeros(2 * BATCHED_ELEMENTS, dtype=torch.int16),
    ]


def test_every_state_counts_as_its_direct_count():
    slots = StatisticSlots()  # no host kernel: CUDA's kernels, on CPU
    tensors = cases()
    pending = [slots.take(t) for t in tensors]
    fetched = slots.fetch()
    for t, stats in zip(tensors, pending):
        stats.resolve(fetched.get(stats.device))
        assert (stats.nnz, stats.is01) == direct(t), (t.dtype, tuple(t.shape))


def test_pending_statistics_hold_a_bounded_amount(monkeypatch):
    # 3 x BATCH_ELEMENTS elements of small states and 3 x CHUNK_SLOTS large ones before a flush:
    # copies are held up to one batch (BATCH_ELEMENTS float64 at most, its counts kept instead),
    # slots in CHUNK_SLOTS chunks of 8 bytes
    slots = StatisticSlots()
    small, large = torch.ones(BATCHED_ELEMENTS), torch.ones(BATCHED_ELEMENTS + 1)
    for _ in range(3 * BATCH_ELEMENTS // BATCHED_ELEMENTS):
        slots.take(small)
    for _ in range(CHUNK_SLOTS // 2 * 3):
        slots.take(large)
    assert slots.peak_bytes <= 3 * CHUNK_SLOTS * 8 + 8 * BATCH_ELEMENTS
    fetched = slots.fetch()
    again = slots.take(large)
    assert again.slot == 0 and fetched  # the slots are free again after a flush
