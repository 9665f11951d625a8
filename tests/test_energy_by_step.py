"""Energy per recorder step and per rank, for every model: filters and breakdowns.

The reference for a step or a rank is an independent capture: the same deterministic
training (tests/training_runs.py) recorded again holding only that step (a schedule) or
only that rank (its own trace). `energy(full, step=k, rank=r)` must equal the energy of
the trace that only holds step k of rank r, and the report's energy_by_step[k] /
energy_by_rank[r] of the full trace too; the breakdowns add up to the total.

Lemaire's qualia convention prices one inference from spike rates pooled over every call,
so it has no per-step share (energy_by_step is empty), but its step filter still equals
the separately recorded step.
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from spiketrace.analyze import open_trace
from spiketrace.analyze.cli import main
from spiketrace.analyze.energy import energy
from spiketrace.analyze.present.sql_tables import register_energy
from tests.training_runs import record, record_ranks

STEPS = 3
MODELS = {  # model -> preset
    "compute": "compute-fp32-45nm",
    "neuromc": "neuromc-like-v1",
    "lemaire": "lemaire-spikingjelly",
    "spikesim": "spikesim-rram-64",
}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def total(report) -> float:
    return report.energy_total_pj if hasattr(report, "energy_total_pj") else report.total_pj


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("by_step")
    return {
        "full": record_ranks(root / "full", STEPS),  # ranks 0 and 1, steps 0..2
        "step1": record(root / "step1", STEPS, rank=0, only_step=1),  # rank 0, step 1 only
        "rank1": record(root / "rank1", STEPS, rank=1, world_size=2),  # rank 1 only, all steps
    }


@pytest.mark.parametrize("model", list(MODELS))
def test_step_and_rank_breakdowns_add_up_and_equal_separate_captures(runs, model):
    preset = MODELS[model]
    with open_trace(runs["full"]) as full:
        report = energy(full, model, preset)
        step1_rank0 = energy(full, model, preset, step=1, rank=0)
        rank1 = energy(full, model, preset, rank=1)
        two_steps = energy(full, model, preset, step=[0, 2])
    with open_trace(runs["step1"]) as trace:
        alone_step1 = energy(trace, model, preset)
    with open_trace(runs["rank1"]) as trace:
        alone_rank1 = energy(trace, model, preset)

    assert total(report) > 0 and total(alone_step1) > 0
    assert list(report.energy_by_step) == ["0", "1", "2"] and list(report.energy_by_rank) == ["0", "1"]
    assert close(sum(report.energy_by_step.values()), total(report))
    assert close(sum(report.energy_by_rank.values()), total(report))
    # the filters select exactly what a separate capture of that step / rank holds
    assert close(total(step1_rank0), total(alone_step1))
    assert close(total(rank1), total(alone_rank1))
    assert close(report.energy_by_rank["1"], total(alone_rank1))
    assert close(step1_rank0.energy_by_step["1"], total(alone_step1))
    assert close(total(two_steps), report.energy_by_step["0"] + report.energy_by_step["2"])
    # a filtered report breaks down only what it selected
    assert list(step1_rank0.energy_by_step) == ["1"] and list(step1_rank0.energy_by_rank) == ["0"]


def test_per_step_energy_of_each_rank_is_the_separate_capture(runs):
    """NeuroMC, the training model: step 1 of rank 0 (from the full two-rank trace) is the
    trace that recorded only that step; steps 0 and 2 of rank 0 make up the rest of rank 0."""
    with open_trace(runs["full"]) as full:
        rank0 = energy(full, "neuromc", rank=0)
        step1 = energy(full, "neuromc", step=1)
    with open_trace(runs["step1"]) as trace:
        alone = energy(trace, "neuromc")
    assert close(rank0.energy_by_step["1"], alone.energy_total_pj)
    assert close(step1.energy_by_rank["0"], alone.energy_total_pj)
    assert close(sum(rank0.energy_by_step.values()), rank0.energy_total_pj)


def test_qualia_has_no_step_share_but_filters_by_step(runs):
    with open_trace(runs["full"]) as full:
        report = energy(full, "lemaire", "lemaire-qualia", rank=0)
        step1 = energy(full, "lemaire", "lemaire-qualia", step=1, rank=0)
    with open_trace(runs["step1"]) as trace:
        alone = energy(trace, "lemaire", "lemaire-qualia")
    assert report.energy_by_step == {} and report.energy_by_rank == {}
    assert alone.total_pj > 0 and close(step1.total_pj, alone.total_pj)


def test_energy_by_step_view_and_cli(runs):
    with open_trace(runs["full"]) as full:
        report = energy(full, "neuromc")
        register_energy(full, report, model="neuromc", preset="neuromc-like-v1")
        rows = full.sql("SELECT step, pj, share FROM energy_by_step ORDER BY step")
        components = full.sql("SELECT DISTINCT breakdown FROM energy_by_component")["breakdown"].tolist()
    assert rows["step"].tolist() == [0, 1, 2]
    for step, pj in zip(rows["step"], rows["pj"]):
        assert close(pj, report.energy_by_step[str(step)])
    assert close(rows["share"].sum(), 1.0)
    assert "step" not in components and "rank" not in components  # not a component of the energy

    result = CliRunner().invoke(main, ["energy", str(runs["full"]), "--model", "compute", "--by", "step",
                                       "--format", "csv", "--step", "1", "--rank", "0"])
    assert result.exit_code == 0, result.output
    with open_trace(runs["step1"]) as trace:
        alone = energy(trace, "compute")
    lines = [line.split(",") for line in result.output.splitlines()]
    steps = [row for row in lines if row[0] == "step"]
    assert [row[1] for row in steps] == ["1"] and close(float(steps[0][2]), alone.energy_total_pj)
