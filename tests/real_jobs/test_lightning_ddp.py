"""The Lightning callback under Lightning's DDP strategy, 2 CPU processes (gloo): one trace
directory holds both ranks; each rank's first recorded step (the same initial weights on both)
equals a hand-placed Recorder on that rank's own batch; rank 0 logs its scalars to the
trainer's logger, equal to `spiketrace counts --rank 0 --step N`."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import torch

from spiketrace.analyze import count, open_trace
from spiketrace.capture import Recorder
from tests.loop_models import SpikingClassifier, dataset
from tests.real_jobs.tracefiles import run_job

COUNTERS = ["flop", "mac", "ac", "synop"]


def _totals(trace, **where) -> dict:
    result = count(trace, COUNTERS, by=("stage",), **where)
    frame = result.frame[result.frame["scope"] == "Global"]
    return {(row.stage, row.counter): int(row.value) for row in frame.itertuples()}


def test_ddp_ranks_are_recorded_and_rank_zero_logs(tmp_path):
    job = run_job("lightning_ddp.py", tmp_path, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    fit = tmp_path / "traces" / "fit"
    assert subprocess.run([sys.executable, "-m", "spiketrace.analyze.cli", "validate", str(fit)],
                          capture_output=True).returncode == 0
    data = dataset()
    with open_trace(fit) as trace:
        assert trace.ranks == [0, 1]
        for rank in (0, 1):
            facts = [f for f in trace.manifests[rank]["step_facts"] if f["kind"] == "train"]
            assert [f["index"] for f in facts] == [0, 2]
            # DistributedSampler without shuffling: rank r's first batch is samples r, r+2, ... (8 of them)
            x, y = data.tensors[0][rank::2][:8], data.tensors[1][rank::2][:8]
            module = SpikingClassifier()
            module.load_state_dict(torch.load(tmp_path / "initial.pt"))
            hand = tmp_path / f"hand{rank}"
            with Recorder(hand, model=module) as rec:
                with rec.stage("forward"):
                    loss = module.loss_of((x, y)) / 1
                    loss.detach().clone()
                with rec.stage("backward"):
                    loss.backward()
            with open_trace(hand) as theirs:
                ours = _totals(trace, rank=rank, step=facts[0]["step"])
                # forward and backward: the same work on the same weights (DDP's gradient
                # all-reduce is a collective, which these counters do not count)
                assert {k: v for k, v in ours.items() if k[0] != "optimizer"} == _totals(theirs)
        logged = {}
        with open(next((tmp_path / "logs").rglob("metrics.csv"))) as f:
            for row in csv.DictReader(f):
                logged.update({(int(row["step"]), k): float(v) for k, v in row.items()
                               if k.startswith("spiketrace/") and v})
        for fact in [f for f in trace.manifests[0]["step_facts"] if f["kind"] == "train"]:
            counts = json.loads(subprocess.run(
                [sys.executable, "-m", "spiketrace.analyze.cli", "counts", str(fit), "--rank", "0", "--step",
                 str(fact["step"]), "--format", "json"], capture_output=True, text=True, check=True).stdout)
            for counter, entry in counts["counters"].items():
                assert logged[(fact["global_step"], f"spiketrace/{counter}")] == float(entry["total"])
