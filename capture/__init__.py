"""spiketrace capture: record a PyTorch run (ops, tensors, modules, stages, optimizer steps)
into a Parquet trace. Imported inside the training script; depends on torch, pyarrow and
`schemas` only.

The torch-dependent names are imported lazily, so `spiketrace.capture.store.writer` (pure pyarrow) can be used
where torch is absent.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "Recorder": "spiketrace.capture.session.recorder",
    "RecorderError": "spiketrace.capture.session.recorder",
    "schedule": "spiketrace.capture.session.recorder",
    "record_training_step": "spiketrace.capture.session.scenarios",
    "record_inference": "spiketrace.capture.session.scenarios",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spiketrace.capture' has no attribute {name!r}")
