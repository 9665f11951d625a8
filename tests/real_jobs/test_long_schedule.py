"""A 300-step training loop under a schedule: only the scheduled steps are recorded (events,
stage markers, steps_recorded), each cycle reaches on_trace_ready, memory stays flat, the
tracker's grad hooks are released, and training is bit-identical to an uncaptured run."""

from __future__ import annotations

import json

from spiketrace.capture import schedule
from tests.real_jobs.tracefiles import manifests, reference_problems, run_job, table

STEPS = 300
RSS_SLACK = 4 << 20  # bytes; before the hooks were released it grew ~20 MB over these 200 steps


def test_schedule_over_300_steps_records_its_steps_only_with_flat_memory(tmp_path):
    job = run_job("long_schedule.py", tmp_path, STEPS, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["parameters_identical"]
    assert result["scheduled"]["losses"] == result["plain_losses"]
    assert result["every"]["losses"] == result["plain_losses"][: STEPS // 3]

    rule = schedule(skip_first=10, wait=20, warmup=2, active=3)
    recorded = {step for step in range(STEPS) if rule(step)}
    root = tmp_path / "scheduled"
    manifest = manifests(root)[0]
    assert manifest["status"] == "complete" and manifest["degraded"] == [] and not reference_problems(root)
    assert manifest["steps_recorded"] == len(recorded) == 33
    assert result["scheduled"]["ready"] == 11  # one on_trace_ready per recorded cycle
    for name in ("events", "module_events", "stage_markers", "optimizer_steps"):
        assert set(table(root, name).column("step").to_pylist()) == recorded, name
    markers = table(root, "stage_markers").to_pylist()
    assert len(markers) == len(recorded) * 3 * 2
    assert {m["name"]: m["phase"] for m in markers} == {"forward": "forward", "backward": "backward",
                                                         "sgd_step": "optimizer"}

    every = manifests(tmp_path / "every")[0]
    assert every["steps_recorded"] == STEPS // 3 and not reference_problems(tmp_path / "every")
    for part in ("scheduled", "every"):
        rss = sorted(result[part]["rss"].items(), key=lambda item: int(item[0]))
        assert rss[-1][1] - rss[0][1] < RSS_SLACK, (part, rss)
        assert result[part]["held_hooks"] <= 20, part  # one step's grad hooks, not every step's
