"""Each fast path of the capture (capture/session/fast_paths.py) records exactly what its slow path does.

The same deterministic training run is captured with every fast path on, with all of them
off (SPIKETRACE_SLOW_PATHS=all) and with each one off alone; every column of every table
must be equal, but for storage pointers: their values come from the allocator, whose reuse
of freed addresses depends on every allocation in the process (the capture's own
temporaries included, which a fast path may avoid), so they are compared through what reads
them: the counters' numbers, which must be equal too. Run ids differ by design.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import counts
from spiketrace.capture import Recorder
from spiketrace.capture.session.fast_paths import (
    ENVIRONMENT_VARIABLE,
    FAST_PATHS,
    available_fast_paths,
    enabled_fast_paths,
)
from spiketrace.schemas.tables import TABLES
from tests import zoo

CASES = [c for c in zoo.CASES if c.name in ("sew", "attention", "multistep")]
# A key that orders each table's rows the same way in every capture of the same run.
ORDER = {
    "events": "seq", "event_tensors": "seq, k", "tensors": "tensor_id", "tensor_frees": "uid, freed_seq",
    "op_stats": "seq, stat", "packed_inputs": "seq, position", "scopes": "scope_id", "modules": "module_id",
    "module_events": "seq", "neuron_memories": "seq, module_id, name", "stage_markers": "ALL",
    "optimizer_steps": "ALL", "collectives": "seq",
}


def capture_tables(path, case, monkeypatch, slow: str) -> dict[str, pd.DataFrame]:
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, slow)
    model, x = zoo.build(case)
    optimizer = torch.optim.Adam(model.parameters())
    with Recorder(path, model=model, optimizer=optimizer, keep_binary_inputs=True) as recorder:
        zoo.run_steps(recorder, model, x, case, optimizer)
    monkeypatch.delenv(ENVIRONMENT_VARIABLE)
    return read_tables(path)


def read_tables(path) -> dict[str, pd.DataFrame]:
    """Every table of the trace in ORDER, storage pointers left out, and its counts."""
    tables = {}
    with open_trace(path) as trace:
        for table in TABLES:
            frame = trace.sql(f"SELECT * EXCLUDE (rank) FROM {table} ORDER BY {ORDER[table]}")
            tables[table] = frame.drop(columns=["storage_ptr"], errors="ignore")
        tables["counts"] = counts(trace).sort_values(["counter", "scope", "op"]).reset_index(drop=True)
    return tables


def test_the_switch_names_every_fast_path_and_refuses_unknown_names(monkeypatch):
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "all")
    assert enabled_fast_paths() == frozenset()
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "interned_arguments")
    assert enabled_fast_paths() == available_fast_paths() - {"interned_arguments"}
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, "interned_args")
    with pytest.raises(ValueError, match="unknown fast path"):
        enabled_fast_paths()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_fast_path_records_what_its_slow_path_records(tmp_path, monkeypatch, case, shared_scans):
    # shared_scans (tests/conftest.py): the zoo's tensors are small, so every scan is cut here
    fast = capture_tables(tmp_path / "fast", case, monkeypatch, "")
    assert len(fast["events"]) > 100 and fast["tensors"]["nnz"].notna().any()
    for slow in ["all", *FAST_PATHS]:
        other = capture_tables(tmp_path / slow, case, monkeypatch, slow)
        for table, frame in fast.items():
            try:
                pd.testing.assert_frame_equal(other[table], frame, check_dtype=True)
            except AssertionError as exc:
                raise AssertionError(f"{table} differs with {ENVIRONMENT_VARIABLE}={slow}: {exc}") from None
