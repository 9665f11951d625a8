"""A reader that opens a trace again and again while a capture writes it sees a consistent
snapshot every time: only committed flushes are read, so `validate` is clean on
every snapshot (no dangling reference from a flush half written), and the snapshots grow.
At close the capture compacts its small parts: a reader holding the list from before may
find a part gone, and is told the trace changed (TraceChangedError), never given rows of
two lists at once."""

from __future__ import annotations

import subprocess
import sys
import time

from spiketrace.analyze import TraceError, open_trace
from spiketrace.analyze.trace import TraceChangedError
from tests.real_jobs.tracefiles import JOBS, REPO

STEPS = 30


def test_a_reader_during_a_capture_sees_only_consistent_snapshots(tmp_path):
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.Popen([sys.executable, str(JOBS / "capture_while_read.py"), str(tmp_path), str(STEPS)],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = tmp_path / "trace"
    snapshots, sizes, problems, superseded = 0, [], [], 0
    deadline = time.monotonic() + 240
    while job.poll() is None and time.monotonic() < deadline:
        try:
            with open_trace(root, verify=True) as trace:
                found = trace.validate()
                problems += [f"snapshot {snapshots} ({trace.count('events')} events): {p}" for p in found]
                sizes.append(trace.count("events"))
                snapshots += 1
        except TraceChangedError:
            superseded += 1
        except TraceError as exc:
            # Only before the first manifest exists may the directory not be a trace yet.
            assert "no manifest.json" in str(exc) or "no such trace directory" in str(exc), exc
    out, err = job.communicate(timeout=240)
    assert job.returncode == 0, err[-3000:]
    assert problems == []
    running = [size for size in sizes if size]
    assert snapshots >= 5 and len(set(running)) >= 3, (snapshots, sizes)  # saw it grow while running
    assert running == sorted(running)
    with open_trace(root) as trace:  # and the finished trace is whole
        assert trace.complete and trace.validate() == [] and trace.count("events") >= max(sizes)
    print(f"\n{snapshots} snapshots read during the capture, {len(set(running))} distinct, all consistent; "
          f"{superseded} superseded by the compaction at close")
