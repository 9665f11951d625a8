"""Binary inputs of synaptic ops kept bit-packed (the capture setting keep_binary_inputs):
packed on the tensor's device, fetched as bytes at flush."""

from __future__ import annotations

import torch


def pack_bits(t: torch.Tensor) -> torch.Tensor:
    """Row-major 0/1 values packed 8 per byte, most significant bit first (stays on device)."""
    flat = (t.reshape(-1) != 0).to(torch.uint8)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=t.device)
    return (flat.view(-1, 8) * weights).sum(dim=1, dtype=torch.uint8)


def bits_bytes(bits: torch.Tensor) -> bytes:
    try:
        return bits.numpy().tobytes()
    except (RuntimeError, ImportError):  # torch built or run without numpy
        return bytes(bits.tolist())
