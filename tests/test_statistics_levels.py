"""value_statistics="synaptic": statistics only where a shipped rule reads them.

The level must serve every analysis that says it needs no more than "synaptic" exactly as
"full" does (the same counts and energies on the same run), take fewer statistics, be written
in the manifest, and make the analyses that need "full" (NeuroMC, neuron_state) refuse the
trace with the reason instead of reading a missing statistic as "no spike".
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from spiketrace.analyze import open_trace
from spiketrace.analyze.counters import counts
from spiketrace.analyze.energy import energy
from spiketrace.analyze.trace.statistics_level import InsufficientStatisticsError, trace_level
from spiketrace.capture import Recorder
from tests import zoo
from tests.training_runs import record

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

BASIC_COUNTERS = ["flop", "memory_access", "synop", "mac", "ac"]
SYNAPTIC_MODELS = {"compute": "compute-fp32-45nm", "lemaire": "lemaire-spikingjelly", "spikesim": "spikesim-rram-64"}


def _total(report) -> float:
    return report.energy_total_pj if hasattr(report, "energy_total_pj") else report.total_pj


def _sorted_counts(trace, names) -> pd.DataFrame:
    frame = counts(trace, names, by=("stage",))
    return frame.sort_values(["counter", "scope", "op", "stage"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    """The same deterministic training run (conv on spikes, BN, LIF/IF, Linear; forward,
    backward, SGD, eval) recorded at each level."""
    root = tmp_path_factory.mktemp("levels")
    return {level: record(root / level, 2, value_statistics=level) for level in ("full", "synaptic", "none")}


def test_the_level_is_written_in_the_manifest_and_read_back(training):
    for level, path in training.items():
        with open_trace(path) as trace:
            assert trace.manifest["settings"]["value_statistics"] == level
            assert trace_level(trace) == level


def test_synaptic_takes_fewer_statistics_than_full(training):
    taken = {}
    for level, path in training.items():
        with open_trace(path) as trace:
            taken[level] = trace.sql("SELECT count(*) FILTER (WHERE nnz IS NOT NULL) AS n, count(*) AS rows FROM tensors")
    assert taken["none"]["n"][0] == 0
    assert 0 < taken["synaptic"]["n"][0] < taken["full"]["n"][0] / 2


def test_level_none_takes_only_the_op_statistics_of_the_neurobench_convention(training):
    # The op scalars conditioned on 0/1 operands (conv spike taps, GEMM output sums, ...) are
    # read only by the spike counters and energy models, which need level "synaptic"; the
    # NeuroBench pair counts and ternary flags (condition "forward") serve its convention at
    # any level (tests/test_neurobench_convention.py), so "none" keeps exactly those.
    from spiketrace.schemas.statistics import STATISTICS

    rows = {}
    for level, path in training.items():
        with open_trace(path) as trace:
            rows[level] = trace.sql("SELECT stat, count(*) AS n FROM op_stats GROUP BY stat ORDER BY stat")
    assert rows["synaptic"].equals(rows["full"])
    kept = rows["full"][[STATISTICS[s].condition == "forward" for s in rows["full"]["stat"]]].reset_index(drop=True)
    assert 0 < len(kept) < len(rows["full"])  # this run has both kinds: the test can fail
    assert rows["none"].equals(kept)


def test_synaptic_serves_the_counters_exactly_as_full(training):
    with open_trace(training["full"]) as full, open_trace(training["synaptic"]) as synaptic:
        expected = _sorted_counts(full, BASIC_COUNTERS)
        got = _sorted_counts(synaptic, BASIC_COUNTERS)
        # The neuromorphic memory-access counter reads layer inputs at forward hooks.
        nma_full = counts(full, ["neuromorphic_memory_access"]).sort_values(["scope", "op"]).reset_index(drop=True)
        nma_synaptic = counts(synaptic, ["neuromorphic_memory_access"]).sort_values(["scope", "op"]).reset_index(drop=True)
    assert expected["value"].sum() > 0 and (expected["counter"] == "ac").any()
    pd.testing.assert_frame_equal(got, expected)
    pd.testing.assert_frame_equal(nma_synaptic, nma_full)


@pytest.mark.parametrize("model", list(SYNAPTIC_MODELS))
def test_synaptic_serves_the_energy_models_that_need_no_more(training, model):
    with open_trace(training["full"]) as full, open_trace(training["synaptic"]) as synaptic:
        expected = _total(energy(full, model, SYNAPTIC_MODELS[model]))
        got = _total(energy(synaptic, model, SYNAPTIC_MODELS[model]))
    assert expected > 0
    assert math.isclose(got, expected, rel_tol=1e-9)


def test_spike_rate_views_are_the_same(training):
    query = "SELECT * FROM layer_spike_rates ORDER BY ALL"
    with open_trace(training["full"]) as full, open_trace(training["synaptic"]) as synaptic:
        expected, got = full.sql(query), synaptic.sql(query)
    assert len(expected) > 0
    pd.testing.assert_frame_equal(got, expected)


@pytest.mark.parametrize("analysis", ["neuromc", "neuron_state"])
def test_analyses_that_need_full_refuse_a_synaptic_trace_with_the_fix(training, analysis):
    with open_trace(training["synaptic"]) as trace:
        with pytest.raises(InsufficientStatisticsError, match="value_statistics='synaptic'.*value_statistics='full'"):
            if analysis == "neuromc":
                energy(trace, "neuromc", "neuromc-like-v1")
            else:
                counts(trace, ["neuron_state"])


def test_a_trace_without_statistics_refuses_spike_counters_but_serves_shape_counters(training):
    with open_trace(training["none"]) as none, open_trace(training["full"]) as full:
        with pytest.raises(InsufficientStatisticsError, match="counter synop needs value statistics at level 'synaptic'"):
            counts(none, ["synop"])
        # FLOPs and memory traffic follow from shapes alone: equal to the full trace's.
        pd.testing.assert_frame_equal(_sorted_counts(none, ["flop", "memory_access"]),
                                      _sorted_counts(full, ["flop", "memory_access"]))


@pytest.mark.parametrize("case", [c for c in zoo.CASES if c.name in ("sew", "attention", "conv_geometry", "multistep")],
                         ids=lambda c: c.name)
def test_synaptic_equals_full_on_zoo_models(tmp_path, case):
    """Spike counters and the models that need no more than "synaptic", on residual SEW
    blocks (element-wise adds of spikes), attention with bmm, conv geometry and multi-step."""
    results = {}
    for level in ("full", "synaptic"):
        model, x = zoo.build(case)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        with Recorder(tmp_path / level, model=model, optimizer=optimizer, value_statistics=level) as recorder:
            zoo.run_steps(recorder, model, x, case, optimizer)
        with open_trace(tmp_path / level) as trace:
            results[level] = (_sorted_counts(trace, BASIC_COUNTERS),
                              {m: _total(energy(trace, m, p)) for m, p in SYNAPTIC_MODELS.items() if m != "spikesim"})
    pd.testing.assert_frame_equal(results["synaptic"][0], results["full"][0])
    for model, expected in results["full"][1].items():
        assert math.isclose(results["synaptic"][1][model], expected, rel_tol=1e-9), model


def test_an_unknown_level_is_misuse_and_raises(tmp_path):
    with pytest.raises(ValueError, match="value_statistics must be one of"):
        Recorder(tmp_path / "t", value_statistics="some")


def test_the_synaptic_level_covers_every_operand_a_rule_reads_values_of():
    # a rule reading a positional operand's is01/nnz (spiketrace.analyze.counters) gets a null at
    # the synaptic level unless SYNAPTIC_LEVEL_OPERANDS takes that operand's statistics
    import re

    from spiketrace.analyze.counters import ac, flop, mac, memory_access, synop
    from spiketrace.schemas.statistics_levels import SYNAPTIC_LEVEL_OPERANDS

    value_read = re.compile(r"\ba(\d+)_(?:is01|nnz)\b")
    missing = {}
    for counter in (flop, mac, ac, synop, memory_access):
        for op, rule in counter.RULES.items():
            read = {int(position) for position in value_read.findall(rule or "")}
            if not read <= set(SYNAPTIC_LEVEL_OPERANDS.get(op, ())):
                missing[op] = sorted(read)
    assert not missing
