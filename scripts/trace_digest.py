"""One digest per (zoo model, table) of a deterministic captured training run: what a change
that must not alter the trace (a move of files, a refactor) is checked with.

    python scripts/trace_digest.py > before.txt   # at the old commit
    python scripts/trace_digest.py > after.txt    # at the new one
    diff before.txt after.txt                     # nothing: the traces are equal

Each zoo case (tests/zoo.py) is captured with Adam, two training steps, binary inputs kept, in
this process, and every table is read back ordered by its key (as tests/test_fast_paths.py
orders them), its rows hashed. Left out: what differs between any two captures by design or by
the allocator: run ids, times, paths (the manifest is not hashed) and storage pointers (the
allocator's addresses; what reads them, the counters' numbers, is hashed instead).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

try:  # the one package
    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import counts
    from spiketrace.capture import Recorder
    from spiketrace.schemas.tables import TABLES
except ImportError:  # the three top-level packages before it
    from spiketrace.analyze import open_trace
    from spiketrace.analyze.counters import counts
    from spiketrace.capture import Recorder
    from spiketrace.schemas.tables import TABLES
from tests import zoo
from tests.test_fast_paths import ORDER


def digests(case) -> dict[str, str]:
    model, x = zoo.build(case)
    optimizer = torch.optim.Adam(model.parameters())
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "trace"
        with Recorder(path, model=model, optimizer=optimizer, keep_binary_inputs=True) as recorder:
            zoo.run_steps(recorder, model, x, case, optimizer)
        found = {}
        with open_trace(path) as trace:
            for table in TABLES:
                frame = trace.sql(f"SELECT * EXCLUDE (rank) FROM {table} ORDER BY {ORDER[table]}")
                frame = frame.drop(columns=["storage_ptr"], errors="ignore")
                found[table] = frame.to_csv(index=False)
            frame = counts(trace).sort_values(["counter", "scope", "op"]).reset_index(drop=True)
            found["counts"] = frame.to_csv(index=False)
    return {table: hashlib.sha256(text.encode()).hexdigest()[:16] for table, text in found.items()}


if __name__ == "__main__":
    for case in zoo.CASES:
        for table, digest in digests(case).items():
            print(f"{case.name:18} {table:16} {digest}")
