"""Read scalars back from the sinks they were logged to, with each tool's own reader where it has
one: {step: {name: value}}. Shared by the live-analysis and training-loop tests."""

from __future__ import annotations

import csv
import json
import os
import struct
from pathlib import Path


def read_csv(path: Path) -> dict[int, dict[str, float]]:
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows and list(rows[0]) == ["step", "recorder_step", "name", "value"]
    found: dict[int, dict[str, float]] = {}
    for row in rows:
        found.setdefault(int(row["step"]), {})[row["name"]] = float(row["value"])
    return found


def read_tensorboard(log_dir: Path) -> dict[int, dict[str, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    found: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for event in events.Scalars(tag):
            found.setdefault(event.step, {})[tag] = event.value
    return found


def read_mlflow(store: Path, experiment: str | None = None, run_name: str | None = None) -> dict[int, dict[str, float]]:
    """The metrics of the one run (of `experiment`, named `run_name`, where given) of the MLflow
    file store at `store`, which must have ended (FINISHED)."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 refuses file stores without it
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=Path(store).as_uri())
    experiments = [client.get_experiment_by_name(experiment)] if experiment else client.search_experiments()
    (run,) = client.search_runs([e.experiment_id for e in experiments])
    assert run.info.status == "FINISHED" and (run_name is None or run.info.run_name == run_name)
    found: dict[int, dict[str, float]] = {}
    for name in run.data.metrics:
        for metric in client.get_metric_history(run.info.run_id, name):
            found.setdefault(metric.step, {})[name] = metric.value
    return found


def read_wandb(wandb_dir: Path, step_key: str | None = None) -> dict[int, dict[str, float]]:
    """The history (by W&B's step, or by the logged `step_key`'s value) of the offline run's
    .wandb file: the LevelDB log format (a 7-byte file header,
    32 KiB blocks of records, each a 7-byte header crc32 (of type and data), length, type: full,
    first, middle or last piece), each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    (path,) = Path(wandb_dir).glob("offline-run-*/*.wandb")
    data, position, pieces, records = path.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a header is padding
            position += 32768 - position % 32768
            continue
        checksum, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            break
        body = data[position + 7:position + 7 + length]
        position += 7 + length
        pieces = body if kind in (1, 2) else pieces + body
        if kind in (1, 4):
            records.append(pieces)
    found: dict[int, dict[str, float]] = {}
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            step = int(items[step_key]) if step_key else record.history.step.num
            found.setdefault(step, {}).update({name: value for name, value in items.items() if not name.startswith("_")})
    return found
