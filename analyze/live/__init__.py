"""spiketrace.analyze.live: analyse a trace while it is being recorded, step by step, and log
the numbers where training curves are watched (CSV, TensorBoard, MLflow, W&B).

A training loop's callback (spiketrace.capture.live) records a few steps with a Recorder and,
as each recorded cycle is flushed, asks a worker process to analyse them:

    python -m spiketrace.analyze.live --config '{"sinks": [{"kind": "tensorboard", "log_dir": "tb"}]}'

The worker (__main__.py) reads one JSON request per line on stdin and answers one per line on
stdout; the protocol, the scalar names and the sinks are in docs/live_analysis.md. It runs in
a process of its own so that the analysis (DuckDB, the energy models) never slows or breaks
the training process, and it imports no torch, as nothing under analyze/ does.

- scalars.py: `step_scalars(analysis, recorder_step, rank, config)`, the scalars of one recorder
  step, computed by the same calls as `spiketrace counts` and `spiketrace energy` with --step;
- sinks.py: where they are written, each sink's package imported only when it is asked for.

This room sits above results and present (it uses Analysis and Selection) and below nothing
but cli/, which it never imports (tests/test_layout.py). The names below are imported on
first use (PEP 562), so a training process may import this package for its names without
loading the analysis.
"""

from importlib import import_module

# The module a training loop runs as the worker: [sys.executable, "-m", WORKER_MODULE, "--config", json]
WORKER_MODULE = "spiketrace.analyze.live"

_PUBLIC = {
    "ConfigError": "spiketrace.analyze.live.scalars",
    "EnergyEntry": "spiketrace.analyze.live.scalars",
    "ScalarConfig": "spiketrace.analyze.live.scalars",
    "StepScalars": "spiketrace.analyze.live.scalars",
    "step_scalars": "spiketrace.analyze.live.scalars",
    "SINK_KINDS": "spiketrace.analyze.live.sinks",
    "SinkError": "spiketrace.analyze.live.sinks",
    "Sinks": "spiketrace.analyze.live.sinks",
}
__all__ = sorted([*_PUBLIC, "WORKER_MODULE"])


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'spiketrace.analyze.live' has no attribute {name!r}")
    value = getattr(import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
