"""Two ranks opening one trace directory at the same moment, 20 times: no rank may be refused
(the other's files appear while it checks the directory) and every trial holds both ranks."""

from __future__ import annotations

import json

from spiketrace.analyze import open_trace
from tests.real_jobs.tracefiles import manifests, reference_problems, run_job

TRIALS = 20


def test_two_ranks_starting_together_never_refuse_each_other(tmp_path):
    job = run_job("two_ranks_start.py", tmp_path, TRIALS)
    assert job.returncode == 0, job.stderr[-3000:]
    assert json.loads((tmp_path / "result.json").read_text())["errors"] == []
    for trial in range(TRIALS):
        root = tmp_path / f"trial-{trial}"
        found = manifests(root)
        assert sorted(found) == [0, 1], (trial, sorted(found))
        for rank, manifest in found.items():
            assert manifest["status"] == "complete" and manifest["world_size"] == 2
            assert manifest["counts"]["events"] > 0 and not reference_problems(root, rank)
        with open_trace(root) as trace:  # one run: both ranks agreed on its id
            assert trace.ranks == [0, 1] and trace.validate() == []
