"""NeuroMC energy, offline, equal to SpikingJelly 2.0.0's NeuroMCEnergyProfiler /
estimate_neuromc_runtime_energy (op_counter/neuromc/).

    from spiketrace.analyze import open_trace
    from spiketrace.analyze.energy import neuromc
    with open_trace("runs/step") as trace:
        activity = neuromc.activity(trace)                 # the mapping, once
        report = neuromc.cost(activity, neuromc.Costs())   # any number of presets
        report.energy_total_pj, report.energy_by_stage, report.uncosted

Mapping (mapper.py, preset-independent): module fragments from module hook events
(modules.py), trace fragments from aten ops (fallback.py), optimizer fragments from
optimizer_steps (optimizer.py), held as the kinds of fragment a run repeats (kinds.py); then
per kind its primitive counts and the bits it moves per memory instance (activity.py).
Costing (report.py) prices them under a preset (costs.py); sweep.py costs many presets at once.

A trace of more than `shard_events` events (SHARD_EVENTS of analyze/trace/step_ranges.py by
default) is mapped a piece at a time (parts.py): ranks packed up to that many events, a larger
rank a range of its steps at a time, each piece shown in the trace's views in turn. Every
fragment, stage, weight reuse and optimizer step is one step's own, and the pieces' facts are
added up before they are worded, so the activity equals the whole trace's, while the
mapping's memory follows the piece, not the trace (benchmarks/analysis_throughput.py measures
its peak RSS both ways).

Stages are the trace's: each stage's phase, reuse_weights and batch_norm_backward are
SpikingJelly's stage() options (a phase inferred from the stage's name counts as given).
SpikingJelly's estimator never runs optimizer.step() but models it from the optimizer state
(record_optimizer_step); a recorded step() is modelled the same way, from optimizer_steps,
and the aten ops inside an optimizer-phase stage are that step's own, so they are neither
mapped nor uncosted.

Recomputation (activation checkpointing: the forward ops and module calls the trace flags
`recompute`) is executed work and is costed by default, as forward fragments of the stage it
ran in; recompute="exclude" leaves it out, as SpikingJelly does (it skips every forward a
backward stage runs with grad enabled), and so does compat="spikingjelly" unless recompute is
given. recompute="only" keeps just it.

Default mode fixes SpikingJelly's double and miscounts (Linear backward GEMMs counted twice,
grouped convs over-counted by groups, a 3-D Linear input's rows, a binary-input BN backward
counted twice) and refuses nothing: what no rule covers is listed, ranked by volume, in
`report.uncosted`. compat="spikingjelly" reproduces SpikingJelly's numbers; strict=True
raises where SpikingJelly refuses (ops without a rule, unsupported optimizers, Conv3d,
ambiguous selective backward, presets lacking memory instances).
"""

from __future__ import annotations

from spiketrace.analyze.energy.neuromc.costs import PRESET_UNITS, Costs, MemoryInstanceSpec
from spiketrace.analyze.energy.neuromc.mapper import COMPAT_MODES, MODEL, Activity, activity
from spiketrace.analyze.energy.neuromc.report import Report, cost
from spiketrace.analyze.energy.neuromc.sweep import SWEEPABLE, sweep_totals  # recost's bulk path for sweeps

NeuroMCCosts = Costs
NeuroMCReport = Report

__all__ = ["COMPAT_MODES", "MODEL", "PRESET_UNITS", "Activity", "Costs", "MemoryInstanceSpec", "NeuroMCCosts",
           "NeuroMCReport", "Report", "SWEEPABLE", "activity", "cost", "sweep_totals"]
