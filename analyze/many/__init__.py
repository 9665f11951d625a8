"""Many traces at once: the counts or the energy of several traces (a sweep over seeds, model
sizes or checkpoints), added up and per trace, in this process or on a Dask cluster.

    from spiketrace.analyze import many
    combined = many.count(["runs/seed=0", "runs/seed=1"], ["flop", "mac"], stage="forward")
    combined.total.totals()          # a CounterResult: every trace's counts added
    combined.totals_by_trace()       # trace, counter, value
    combined = many.energy("runs/", "neuromc", engine="dask", workers=2)   # a directory of traces
    combined.energy_total_pj, combined.frame, combined.by_trace["runs/seed=0"]

    sweep = many.recost("runs/", "compute", sweep={"e_mac_pj": [0.5, 1.0, 4.6]})   # rows per preset
    sweep.frame, sweep.by_trace["runs/seed=0"]

A trace argument is a trace directory or a directory of trace directories (traces.py). Each
trace is evaluated as spiketrace.analyze.counters.count / spiketrace.analyze.energy.energy / spiketrace.analyze.energy.recost
evaluate one trace; the results are added (combine.py). Their memory follows a part of the
trace, not the trace: the counters and compute stream it, NeuroMC maps a trace of more than
`shard_events` events a piece at a time (ranks, and a larger rank's step ranges:
analyze/trace/step_ranges.py), and work that adds up over shards but does neither is
evaluated shard by shard (shards.py). engine="dask" (the `cluster` extra) runs the same
evaluation per (trace, rank) shard, or (trace, rank, step range), on a Dask cluster, given as
`client=`, a scheduler address (`scheduler=`) or a LocalCluster of `workers=` processes, and
adds the shards' results: equal to the in-process engine's (engines.py; which models add up
over ranks and over steps: combine.py).
"""

from __future__ import annotations

import warnings

from spiketrace.analyze.counters import ALL_COUNTERS
from spiketrace.analyze.energy import DEFAULT_PRESETS, ModelScopeWarning
from spiketrace.analyze.many.combine import (
    RANK_ADDITIVE_MODELS,
    SIZE_ROWS,
    STEP_ADDITIVE_COUNTERS,
    STEP_ADDITIVE_MODELS,
    CombinedCounts,
    CombinedEnergy,
    CombinedRecost,
    EnergyPart,
    add_counter_results,
    add_energy_parts,
)
from spiketrace.analyze.many.engines import ENGINES, EngineUnavailable, open_engine
from spiketrace.analyze.many.shards import SHARD_EVENTS, CountWork, EnergyWork, RecostWork
from spiketrace.analyze.many.traces import TraceFacts, find_traces

__all__ = ["ENGINES", "RANK_ADDITIVE_MODELS", "SHARD_EVENTS", "SIZE_ROWS", "STEP_ADDITIVE_COUNTERS",
           "STEP_ADDITIVE_MODELS", "CombinedCounts", "CombinedEnergy", "CombinedRecost", "EngineUnavailable",
           "EnergyPart", "TraceFacts", "add_counter_results", "add_energy_parts", "count", "energy", "find_traces",
           "recost"]


def count(traces, counters=None, *, engine: str = "in-process", client=None, scheduler: str | None = None,
          workers: int | None = None, run: str | None = None, verify: bool | None = None, progress: bool = False,
          shard_events: int = SHARD_EVENTS, **options) -> CombinedCounts:
    """spiketrace.analyze.counters.count(trace, counters, **options) over every trace `traces` names, added
    up (`.total`) and per trace (`.by_trace`). `run`, `verify`: how each trace is opened
    (open_trace's; None: its default). `engine`, `client`, `scheduler`, `workers`, `shard_events`:
    see the module docstring. `progress`: a bar over the traces on a terminal (in-process engine)."""
    labels = find_traces(traces)
    names = None if counters is None else (counters,) if isinstance(counters, str) else tuple(counters)
    unknown = [n for n in names or () if n not in ALL_COUNTERS]
    if unknown:
        raise ValueError(f"unknown counter(s) {unknown}; choose from {sorted(ALL_COUNTERS)}")
    work = CountWork(names, options, {"run": run, "verify": verify}, shard_events)
    with open_engine(engine, client=client, scheduler=scheduler, workers=workers) as runner:
        results = runner.run(work, labels, progress=progress)
    by_trace = {label: result for label, (_, result) in zip(labels, results)}
    return CombinedCounts(add_counter_results(list(by_trace.values())), by_trace, [facts for facts, _ in results])


def energy(traces, model: str | None = None, preset=None, *, overrides=(), engine: str = "in-process", client=None,
           scheduler: str | None = None, workers: int | None = None, run: str | None = None,
           verify: bool | None = None, progress: bool = False, shard_events: int = SHARD_EVENTS,
           documents: bool = False, **options) -> CombinedEnergy:
    """spiketrace.analyze.energy.energy(trace, model, preset, overrides=..., **options) over every trace
    `traces` names, as report rows: added up (`.frame`) and per trace (`.by_trace`). Model None:
    the preset's, else the traces' default (which they must agree on). Work outside the model's
    scope raises a ModelScopeWarning per trace, as energy() does. `progress`: as count's.
    `documents`: each trace's report as JSON too (`.documents`, report.to_json()), which needs
    each trace evaluated whole (one task per trace on a cluster)."""
    labels = find_traces(traces)
    work = EnergyWork(model, preset, tuple(overrides), options, {"run": run, "verify": verify}, shard_events,
                      documents)
    with open_engine(engine, client=client, scheduler=scheduler, workers=workers) as runner:
        results = runner.run(work, labels, progress=progress)
    facts = [fact for fact, _ in results]
    for fact in facts:
        for message in fact.scope_warnings:
            warnings.warn(message if len(facts) == 1 else f"{fact.label}: {message}", ModelScopeWarning, stacklevel=2)
    parts = [part for _, part in results]
    combined = add_energy_parts(parts, sizes=True)
    model = facts[0].model
    name = getattr(preset, "name", None) or (str(preset) if preset is not None else DEFAULT_PRESETS[model])
    return CombinedEnergy(model, name, combined.frame, {label: part.frame for label, part in zip(labels, parts)},
                          combined.warnings, facts,
                          {label: part.document for label, part in zip(labels, parts) if part.document is not None})


def recost(traces, model: str | None = None, presets=None, *, sweep=None, base=None, engine: str = "in-process",
           client=None, scheduler: str | None = None, workers: int | None = None, run: str | None = None,
           verify: bool | None = None, progress: bool = False, shard_events: int = SHARD_EVENTS,
           **options) -> CombinedRecost:
    """spiketrace.analyze.energy.recost(trace, model, presets, sweep=, base=, **options) over every trace
    `traces` names: each trace (or shard) mapped once and costed under every preset, the rows
    (one per preset and breakdown entry) added per preset (`.frame`) and per trace (`.by_trace`).
    Model None: as recost chooses it (the presets', the swept keys', the traces' default), which
    every trace must agree on. The other arguments: as count's."""
    labels = find_traces(traces)
    presets = tuple(presets) if isinstance(presets, (list, tuple)) else () if presets is None else (presets,)
    work = RecostWork(model, presets, dict(sweep) if sweep else None, base, options, {"run": run, "verify": verify},
                      shard_events)
    with open_engine(engine, client=client, scheduler=scheduler, workers=workers) as runner:
        results = runner.run(work, labels, progress=progress)
    parts = [part for _, part in results]
    added = work.add(parts, sizes=True)
    return CombinedRecost(results[0][0].model, added.frame, {label: part.frame for label, part in zip(labels, parts)},
                          [facts for facts, _ in results])
