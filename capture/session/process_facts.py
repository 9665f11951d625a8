"""Where the recording process runs: its rank and world size, and its model's device."""

from __future__ import annotations

import os

import torch


def rank_and_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def device_of(model: torch.nn.Module | None) -> str:
    parameter = next(model.parameters(), None) if model is not None else None
    if parameter is None or parameter.device.type == "cpu":
        return "cpu"
    if parameter.device.type == "cuda":
        return f"{parameter.device} ({torch.cuda.get_device_name(parameter.device)})"
    return str(parameter.device)
