"""Hugging Face: `Trainer(..., callbacks=[SpiketraceCallback("runs/traces")])` records a few
training steps with their forward, backward and optimizer stages, and logs their scalars where
the Trainer's `report_to` reports (callback.py says how). Needs `transformers` 5.x."""

from __future__ import annotations

from spiketrace.capture.huggingface.callback import DEFAULT_SCHEDULE, SpiketraceCallback

__all__ = ["DEFAULT_SCHEDULE", "SpiketraceCallback"]
