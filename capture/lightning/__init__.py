"""Lightning: `Trainer(callbacks=[SpiketraceCallback("runs/traces")])` records a few training
steps with their forward, backward and optimizer stages, and logs their scalars to the
trainer's loggers (callback.py says how the hooks map onto stages). Needs `lightning` 2.x."""

from __future__ import annotations

from spiketrace.capture.lightning.callback import DEFAULT_SCHEDULE, SpiketraceCallback

__all__ = ["DEFAULT_SCHEDULE", "SpiketraceCallback"]
