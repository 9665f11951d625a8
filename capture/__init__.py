"""spiketrace capture: record a PyTorch run (ops, tensors, modules, stages, optimizer steps)
into a Parquet trace. Imported inside the training script; depends on torch, pyarrow and
`spiketrace.schemas` only.

    from spiketrace.capture import Recorder, record_training_step, record_inference, schedule

The package is laid out in rooms along the path a record takes, each importing only the
rooms below it: `session` (the Recorder, stages, schedules, one-call scenarios, forks and
threads), `ops` (the dispatch mode and op log, arguments, decompositions, collectives,
optimizer steps, per-op scalars), `modules` (scope tracker, grad hooks, module catalog and
events), `tensors` (the tensor registry and value statistics), `context` (the state one
recording shares), `store` (torch-free: column buffers, writer, compaction, trace root, run
id, failures) and `native` (the optional C extension: the per-op record, scans and handler
in C, each with a Python twin that writes the same trace). docs/design.md draws the layout.

The path of one op:

    session/recorder.Recorder          opens the trace, puts the mode and module hooks into torch
      -> ops/dispatch.RecordingMode    torch calls it for every aten op (native/record: in C)
      -> ops/dispatch.OpLog            the op's event, its arguments (ops/arguments) and scalars
      -> tensors/registry.TensorRegistry   one row per tensor state, its value statistics
      -> store/table_buffer.TableBuffer    rows held column by column
      -> store/writer.TraceWriter      Parquet parts and the manifest, committed atomically

The torch-dependent names are imported lazily, so `spiketrace.capture.store.writer` (pure
pyarrow) can be used where torch is absent.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "__version__": "spiketrace.schemas.version",  # the distribution's one version
    "Recorder": "spiketrace.capture.session.recorder",
    "RecorderError": "spiketrace.capture.session.recorder",
    "schedule": "spiketrace.capture.session.recorder",
    "record_training_step": "spiketrace.capture.session.scenarios",
    "record_inference": "spiketrace.capture.session.scenarios",
    "IFNeuron": "spiketrace.capture.modules.declared",  # a hand-written neuron declares what it is
    "LIFNeuron": "spiketrace.capture.modules.declared",
}

__all__ = sorted(name for name in _LAZY if not name.startswith("__"))


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spiketrace.capture' has no attribute {name!r}")
