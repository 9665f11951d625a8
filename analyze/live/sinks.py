"""Where the live worker writes its scalars: a CSV file, TensorBoard event files, an MLflow
tracking store, a W&B offline run.

    sinks = Sinks([{"kind": "csv", "path": "live.csv"}, {"kind": "tensorboard", "log_dir": "tb"}])
    failures = sinks.write([{"step": 10, "recorder_step": 0, "scalars": {"spiketrace/flop": 1.0}}])
    failures += sinks.close()          # [{"sink": "mlflow", "error": "..."}], each reported once

A sink is a spec (SINK_KINDS: kind -> class, each naming the keys it takes) and an object
with write(rows) and close(). Each imports its package when made, so a worker without
mlflow still writes TensorBoard, and opens its file or run at its first write, so a worker
that is never sent a step leaves nothing behind. A sink whose spec is wrong, whose package is
missing or whose write fails is reported once (Sinks returns it, one line: its kind and why)
and then left out; the others go on. The loggers never reach the network: MLflow is given
the tracking URI of the spec, W&B runs offline only.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import time
from collections.abc import Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import IO, Any

from spiketrace.analyze.live.scalars import one_line

# One written step: {"step": logged step, "recorder_step": S, "scalars": {name: float}}
Row = Mapping[str, Any]
CSV_HEADER = ("step", "recorder_step", "name", "value")
MLFLOW_BATCH = 1000  # metrics per log_batch call: MLflow refuses more
# MLflow refuses a metric name with any other character; those become "_" in its store only.
MLFLOW_NAME_REFUSED = re.compile(r"[^\w./\- :]")


class SinkError(Exception):
    """A sink that cannot be used: its spec, its package (one line)."""


def _package(name: str):
    """Import `name` for a sink; SinkError saying so when it cannot be imported."""
    try:
        return import_module(name)
    except Exception as problem:  # noqa: BLE001 - a broken logger package (ImportError or worse) disables its sink only
        raise SinkError(f"cannot import {name}: {one_line(problem)}") from None


class CsvSink:
    """Long format, appended: one line per (step, scalar) under the header step,recorder_step,name,value
    (values as Python writes floats: they read back exactly)."""

    kind, required, optional = "csv", ("path",), ()

    def __init__(self, spec: Mapping) -> None:
        self.path = Path(spec["path"])
        self._file: IO[str] | None = None

    def write(self, rows: Sequence[Row]) -> None:
        file = self._file
        if file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self._file = self.path.open("a", newline="", encoding="utf-8")
            if file.tell() == 0:
                csv.writer(file).writerow(CSV_HEADER)
        csv.writer(file).writerows((row["step"], row["recorder_step"], name, repr(float(value)))
                                   for row in rows for name, value in row["scalars"].items())
        file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class TensorBoardSink:
    """Event files in log_dir, written with the tensorboard package (no torch): one scalar per name,
    tag = name, at the logged step. TensorBoard keeps a scalar as a float32."""

    kind, required, optional = "tensorboard", ("log_dir",), ()

    def __init__(self, spec: Mapping) -> None:
        self.log_dir = str(spec["log_dir"])
        self._writer_class = _package("tensorboard.summary.writer.event_file_writer").EventFileWriter
        self._event = _package("tensorboard.compat.proto.event_pb2").Event
        self._summary = _package("tensorboard.compat.proto.summary_pb2").Summary
        self._writer: Any = None

    def write(self, rows: Sequence[Row]) -> None:
        if self._writer is None:
            self._writer = self._writer_class(self.log_dir)
        for row in rows:
            values = [self._summary.Value(tag=name, simple_value=float(value)) for name, value in row["scalars"].items()]
            self._writer.add_event(self._event(wall_time=time.time(), step=int(row["step"]),
                                               summary=self._summary(value=values)))
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class MlflowSink:
    """One MLflow run in `experiment` (made if missing) of the store at tracking_uri, made at the
    first write and ended (FINISHED) at close; metrics logged at the logged step. The client is
    given the URI: mlflow's global tracking URI is left alone. With `run_id` the metrics go to
    that run (a training framework's own), whose status is its owner's to set."""

    kind, required, optional = "mlflow", ("tracking_uri", "experiment"), ("run_name", "run_id")

    def __init__(self, spec: Mapping) -> None:
        self.tracking_uri, self.experiment = str(spec["tracking_uri"]), str(spec["experiment"])
        self.run_name = spec.get("run_name")
        self._owned = not spec.get("run_id")
        if self.tracking_uri.startswith("file:"):
            # MLflow 3 refuses its file store unless told it is wanted; the spec's file: URI says so
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = _package("mlflow.tracking").MlflowClient(tracking_uri=self.tracking_uri)
        self._metric = _package("mlflow.entities").Metric
        self._run_id: str | None = spec.get("run_id") or None

    def write(self, rows: Sequence[Row]) -> None:
        if self._run_id is None:
            found = self._client.get_experiment_by_name(self.experiment)
            experiment_id = found.experiment_id if found is not None else self._client.create_experiment(self.experiment)
            self._run_id = self._client.create_run(experiment_id, run_name=self.run_name).info.run_id
        stamp = int(time.time() * 1000)
        metrics = [self._metric(MLFLOW_NAME_REFUSED.sub("_", name), float(value), stamp, int(row["step"]))
                   for row in rows for name, value in row["scalars"].items()]
        for start in range(0, len(metrics), MLFLOW_BATCH):
            self._client.log_batch(self._run_id, metrics=metrics[start:start + MLFLOW_BATCH])

    def close(self) -> None:
        if self._run_id is not None and self._owned:
            self._client.set_terminated(self._run_id, "FINISHED")


class WandbSink:
    """A W&B offline run under dir/wandb/offline-run-*/ (mode "offline" only: never the network),
    made at the first write, finished at close; each row one run.log at the logged step (W&B
    drops a step lower than one already logged: send steps in order)."""

    kind, required, optional = "wandb", ("dir", "project"), ("name", "mode")
    # settings that keep an offline run quiet and small; those the installed wandb lacks are left out
    SETTINGS = {"console": "off", "silent": True, "disable_git": True, "save_code": False, "x_disable_stats": True,
                "x_disable_meta": True, "x_disable_machine_info": True}

    def __init__(self, spec: Mapping) -> None:
        if spec.get("mode", "offline") != "offline":
            raise SinkError(f"mode {spec.get('mode')!r}: the live worker runs W&B offline only")
        self.dir, self.project, self.name = str(spec["dir"]), str(spec["project"]), spec.get("name")
        os.environ["WANDB_MODE"] = "offline"
        os.environ["WANDB_SILENT"] = "true"
        self._wandb = _package("wandb")
        self._run: Any = None

    def write(self, rows: Sequence[Row]) -> None:
        if self._run is None:
            Path(self.dir).mkdir(parents=True, exist_ok=True)
            known = getattr(self._wandb.Settings, "model_fields", {})
            settings = self._wandb.Settings(**{k: v for k, v in self.SETTINGS.items() if k in known})
            self._run = self._wandb.init(dir=self.dir, project=self.project, name=self.name, mode="offline",
                                         settings=settings)
        for row in rows:
            self._run.log({name: float(value) for name, value in row["scalars"].items()}, step=int(row["step"]))

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()


SINK_KINDS = {sink.kind: sink for sink in (CsvSink, TensorBoardSink, MlflowSink, WandbSink)}


def make_sink(spec) -> Any:
    """The sink of one spec; SinkError for an unknown kind, a missing or unknown key, a missing package."""
    if not isinstance(spec, Mapping):
        raise SinkError(f"a sink spec is a JSON object with a kind, got {spec!r}")
    kind = spec.get("kind")
    sink = SINK_KINDS.get(kind) if isinstance(kind, str) else None
    if sink is None:
        raise SinkError(f"unknown sink kind {kind!r}; choose from {', '.join(sorted(SINK_KINDS))}")
    missing = [key for key in sink.required if spec.get(key) is None]
    unknown = sorted(set(spec) - {"kind", *sink.required, *sink.optional})
    if missing or unknown:
        what = "lacks " + ", ".join(missing) if missing else f"has unknown key(s) {unknown}"
        raise SinkError(f"spec {what}; it takes {', '.join([*sink.required, *sink.optional])}")
    return sink(spec)


def _kind_of(spec) -> str:
    return str(spec.get("kind")) if isinstance(spec, Mapping) else "?"


class Sinks:
    """The sinks of a worker: write and close reach every working one and return the failures
    not reported yet ([{"sink": kind, "error": one line}]); a failed sink is left out from then on."""

    def __init__(self, specs: Sequence) -> None:
        self.active: list = []
        self._new_failures: list[dict[str, str]] = []
        for spec in specs:
            try:
                self.active.append(make_sink(spec))
            except Exception as problem:  # noqa: BLE001 - a sink that cannot start is reported, never a crash
                self._failed(_kind_of(spec), problem)

    def _failed(self, kind: str, problem: BaseException) -> None:
        reason = one_line(problem)
        if not isinstance(problem, SinkError):
            reason = f"{type(problem).__name__}: {reason}"
        self._new_failures.append({"sink": kind, "error": reason})

    def _taken(self) -> list[dict[str, str]]:
        failures, self._new_failures = self._new_failures, []
        return failures

    def write(self, rows: Sequence[Row]) -> list[dict[str, str]]:
        """Write `rows` to every working sink; the failures not reported before."""
        if rows:
            for sink in list(self.active):
                try:
                    sink.write(rows)
                except Exception as problem:  # noqa: BLE001 - a logger failing must not stop the analysis or the others
                    self.active.remove(sink)
                    self._failed(sink.kind, problem)
                    self._close_quietly(sink)
        return self._taken()

    def close(self) -> list[dict[str, str]]:
        """Close every working sink (flush TensorBoard, end the MLflow run, finish W&B); the new failures."""
        for sink in self.active:
            try:
                sink.close()
            except Exception as problem:  # noqa: BLE001 - one sink failing to close must not keep the others open
                self._failed(sink.kind, problem)
        self.active = []
        return self._taken()

    @staticmethod
    def _close_quietly(sink) -> None:
        with contextlib.suppress(Exception):  # already reported as failed: closing only frees its files
            sink.close()
