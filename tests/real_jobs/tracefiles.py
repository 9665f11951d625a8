"""Reading a trace the plainest way, with pyarrow alone: manifests, parts, references.

The real-job tests check what a capture left on disk without going through `analyze`, so
they test the files themselves (the contract in schemas/), not a reader of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from spiketrace.schemas import layout
from spiketrace.schemas.tables import TABLES

REPO = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).with_name("jobs")


def run_job(script: str, *args, timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    """Run tests/real_jobs/jobs/<script> as a user would: `python script.py ARGS`, from the
    repository root (the package is on sys.path as it is after `pip install -e .`)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, str(JOBS / script), *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout, **popen,
    )


def manifests(root: Path) -> dict[int, dict]:
    found = {}
    for path in Path(root).iterdir():
        rank = layout.manifest_rank(path)
        if rank is not None:
            found[rank] = json.loads(path.read_text())
    return found


def table(root: Path, name: str, rank: int = 0) -> pa.Table:
    """Every part the rank's manifest lists, concatenated (each part must be readable)."""
    manifest = manifests(root)[rank]
    parts = [pq.read_table(Path(root) / part["path"]) for part in manifest["parts"][name]]
    return pa.concat_tables(parts) if parts else TABLES[name].empty_table()


def column(root: Path, name: str, field: str, rank: int = 0) -> list:
    return table(root, name, rank).column(field).to_pylist()


def reference_problems(root: Path, rank: int = 0) -> list[str]:
    """Rows naming rows that do not exist, and manifest counts the parts do not hold."""
    manifest = manifests(root)[rank]
    tables = {name: table(root, name, rank) for name in TABLES}
    problems = [
        f"{name}: manifest counts {manifest['counts'][name]}, parts hold {rows.num_rows}"
        for name, rows in tables.items() if rows.num_rows != manifest["counts"][name]
    ]

    def values(name: str, field: str) -> set:
        return set(tables[name].column(field).to_pylist())

    events, tensor_ids = values("events", "seq"), values("tensors", "tensor_id")
    for name, field, known in [
        ("event_tensors", "seq", events), ("op_stats", "seq", events), ("event_tensors", "tensor_id", tensor_ids),
        ("events", "scope_id", values("scopes", "scope_id")), ("neuron_memories", "tensor_id", tensor_ids | {None}),
        ("collectives", "seq", events),
    ]:
        missing = values(name, field) - known
        if missing:
            problems.append(f"{name}.{field}: {len(missing)} values name no row, e.g. {sorted(missing, key=str)[:3]}")
    return problems
