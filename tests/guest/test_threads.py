"""Ops of other Python threads (capture/session/threads.py): threads started while the recorder is open
are recorded, each under a `thread` value of its own; threads that existed before it opened are
not, and the manifest and the analysis say so."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from tests.guest.harness import compare

PATHS = {"compiled": {}, "python": {"SPIKETRACE_SLOW_PATHS": "all"}}


def ops_by_thread(trace) -> dict[int, Counter]:
    """Each thread value's events, counted by op."""
    found: dict[int, Counter] = {}
    for row in pq.read_table(trace / "events", columns=["thread", "op"]).to_pylist():
        found.setdefault(row["thread"], Counter())[row["op"]] += 1
    return found


def assert_each_worker_did_the_main_threads_work(trace, workers: int) -> None:
    by_thread = ops_by_thread(trace)
    main_ops = by_thread.pop(0)
    assert len(by_thread) == workers, sorted(by_thread)  # a distinct value for each worker thread
    assert sum(main_ops.values()) > 5
    for thread, ops in by_thread.items():
        assert ops == main_ops, (thread, ops - main_ops, main_ops - ops)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_threading_workers_forward_and_grad_are_recorded_per_thread(tmp_path, path):
    manifest, _ = compare("threads_workers", tmp_path, env=PATHS[path])
    assert manifest["degraded"] == [] and manifest["unrecorded_threads"] == []
    assert_each_worker_did_the_main_threads_work(tmp_path / "trace", workers=3)
    ops = set().union(*ops_by_thread(tmp_path / "trace").values())
    assert {"aten.addmm.default", "aten.mm.default", "aten.threshold_backward.default"} <= ops  # forward and grad


def test_a_pool_created_inside_the_recorder_is_recorded_per_thread(tmp_path):
    manifest, _ = compare("threads_pool", tmp_path)
    assert manifest["degraded"] == [] and manifest["unrecorded_threads"] == []
    assert_each_worker_did_the_main_threads_work(tmp_path / "trace", workers=3)


def test_a_pool_started_before_the_recorder_is_named_unrecorded(tmp_path):
    manifest, _ = compare("threads_prewarmed", tmp_path)
    by_thread = ops_by_thread(tmp_path / "trace")
    if len(by_thread) == 3:  # recorded after all: each task as the main thread's
        assert_each_worker_did_the_main_threads_work(tmp_path / "trace", workers=2)
        return
    # Python 3.11 cannot reach a running thread: only the main thread's ops are in the trace,
    # and the manifest names both pool threads, which ran while the recorder was open.
    assert list(by_thread) == [0]
    named = sorted(entry["name"] for entry in manifest["unrecorded_threads"])
    assert named == ["prewarmed_0", "prewarmed_1"], manifest["unrecorded_threads"]
    assert all(entry["started"] == "before" for entry in manifest["unrecorded_threads"])
    counts = CliRunner().invoke(main, ["counts", str(tmp_path / "trace")])
    assert counts.exit_code == 0, counts.output
    caveat = [line for line in counts.stderr.splitlines() if "not recorded" in line]
    assert caveat == ["warning: 2 Python threads ran while capturing but were not recorded (prewarmed_0, "
                      "prewarmed_1: started before the capture opened); any torch ops they ran are missing "
                      "from the trace"], counts.stderr
    assert caveat[0] not in counts.stdout  # stdout stays the table
    info = CliRunner().invoke(main, ["info", str(tmp_path / "trace"), "--format", "json"])
    assert [e["name"] for e in json.loads(info.stdout)["trace"]["unrecorded_threads"]] == named


def test_a_thread_that_outlives_the_recorder_records_and_writes_nothing(tmp_path):
    # The program reports (equal to the plain run's): the thread's dispatch mode stack is empty
    # again after its first op past the close, and no file of the trace changed after it.
    manifest, _ = compare("threads_outlive", tmp_path)
    assert manifest["degraded"] == [] and manifest["unrecorded_threads"] == []
    by_thread = ops_by_thread(tmp_path / "trace")
    assert list(by_thread) == [1] and by_thread[1] == Counter({"aten.mm.default": 1, "aten.relu.default": 1})
