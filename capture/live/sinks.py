"""Where the analysis worker writes scalars: small specs, turned into JSON for the worker
(spiketrace.analyze.live.sinks writes them). Each sink's package is imported by the worker
only; one that is missing there is skipped with one warning."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CsvSink:
    """One CSV file, long format: step, recorder_step, name, value."""

    path: str
    kind: str = "csv"


@dataclass(frozen=True)
class TensorBoardSink:
    """TensorBoard event files in `log_dir` (the `tensorboard` package)."""

    log_dir: str
    kind: str = "tensorboard"


@dataclass(frozen=True)
class MlflowSink:
    """An MLflow run in `experiment` of the tracking store at `tracking_uri` (e.g. file:///abs/mlruns)."""

    tracking_uri: str
    experiment: str = "spiketrace"
    run_name: str | None = None
    run_id: str | None = None  # log into this existing run (a framework's) instead of a new one
    kind: str = "mlflow"


@dataclass(frozen=True)
class WandbSink:
    """A Weights & Biases run written offline under `dir` (`wandb sync` uploads it later)."""

    dir: str
    project: str = "spiketrace"
    name: str | None = None
    mode: str = "offline"
    kind: str = "wandb"


_PATHS = {"csv": "path", "tensorboard": "log_dir", "wandb": "dir"}  # made absolute: the worker's cwd may differ


def sink_spec(sink) -> dict:
    """The JSON spec of a sink (a dataclass above, or a dict with a `kind`)."""
    spec = dict(sink) if isinstance(sink, dict) else asdict(sink)
    if "kind" not in spec:
        raise ValueError(f"a sink needs a kind (csv, tensorboard, mlflow, wandb): {sink!r}")
    key = _PATHS.get(spec["kind"])
    if key and spec.get(key):
        spec[key] = os.path.abspath(os.fspath(spec[key]))
    return spec
