"""The work an engine runs: counting or costing one trace, or one shard of it, with the same
in-process evaluation as a single trace (spiketrace.analyze.counters.count, spiketrace.analyze.energy.energy,
spiketrace.analyze.energy.recost).

A work object holds the question (counters, or model and presets, and their options) and how
to open traces (run=, verify=; a cluster worker has no CLI context to take them from). A shard
is what one evaluation reads: the whole trace, some of its ranks (`open_trace(path, ranks=...)`),
or a range of steps of one rank (analyze/trace/step_ranges.py), chosen by `plan_shards` from
the events each rank holds (the part footers tell, without reading). The module-level functions are the tasks: `plan`
reads a whole trace's facts and its shards, `evaluate_shard` answers the question for a shard,
`evaluate_trace` for a whole trace, shard by shard when it is large. Everything they return is
small: counts per scope and op, a report's rows.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings
from dataclasses import dataclass

from spiketrace.analyze.counters import count
from spiketrace.analyze.energy import ModelScopeWarning, energy, load_preset, model_of, recost
from spiketrace.analyze.energy.scopes import scope_warnings
from spiketrace.analyze.many.combine import (
    RANK_ADDITIVE_MODELS,
    STEP_ADDITIVE_COUNTERS,
    STEP_ADDITIVE_MODELS,
    EnergyPart,
    add_counter_results,
    add_energy_parts,
)
from spiketrace.analyze.many.traces import TraceFacts, read_facts
from spiketrace.analyze.trace import TraceError, open_trace
from spiketrace.analyze.trace.step_ranges import SHARD_EVENTS, restrict, step_bounds, step_ranges

# Evaluations that bound their own memory whatever the trace's size: the counters' engine
# (which the compute model runs) streams a trace in chunks, NeuroMC maps a large one a piece
# at a time (SHARD_EVENTS, analyze/trace/step_ranges.py) and costs it once. In process they
# run whole, as shards would only repeat their fixed cost without lowering their peak memory;
# a cluster still splits them, to spread them over its workers. NeuroMC is told the shard size
# (`shard_events`) to cut its trace by.
SELF_BOUNDED_MODELS = ("compute", "neuromc")
PIECEWISE_MODELS = ("neuromc",)  # those whose mapping takes shard_events


@dataclass(frozen=True)
class Shard:
    """What one evaluation reads: `ranks` of the trace (None: the whole trace), or the steps
    [first, end) of one rank, which are its records [low, high) (None: unbounded). `verify`:
    whether opening it checks the parts' checksums (each rank's parts are checked once)."""

    ranks: tuple[int, ...] | None = None
    steps: tuple[int, int | None] | None = None
    records: tuple[int | None, int | None] | None = None
    verify: bool = True


WHOLE = Shard()


def _values(selected) -> set | None:
    if selected is None:
        return None
    return set(selected) if isinstance(selected, (list, tuple, set)) else {selected}


def _holds(steps: tuple[int, int | None], wanted: set | None) -> bool:
    return wanted is None or any(s >= steps[0] and (steps[1] is None or s < steps[1]) for s in wanted)


def plan_shards(work, trace, *, pack: bool, verified: bool) -> list[Shard]:
    """The shards of `trace` (opened whole) for `work`: [WHOLE] when the work does not add up
    over ranks, or (`pack`, the in-process engine) when it streams or the trace holds at most
    work.shard_events events; else one shard per rank (`pack`: consecutive ranks together up
    to that many events), a rank holding more cut into step ranges of about that many events
    where the work adds up over steps. Ranks and steps the options leave out (`rank=`,
    `step=`) get no shard, but one shard always runs (an empty selection gives the empty
    result it gives in one process). `verified`: the trace's parts were checked when opened."""
    if not work.splits_by_rank() or (pack and work.bounds_own_memory()):
        return [WHOLE]
    limit = work.shard_events
    events = dict.fromkeys(trace.ranks, 0)
    for part in trace.parts.get("events", []):
        events[part.rank] = events.get(part.rank, 0) + part.rows
    wanted_ranks, wanted_steps = _values(work.options.get("rank")), _values(work.options.get("step"))
    ranks = [r for r in trace.ranks if wanted_ranks is None or r in wanted_ranks] or trace.ranks[:1]
    if pack and sum(events[r] for r in ranks) <= limit:
        return [WHOLE]
    shards: list[Shard] = []
    group: list[int] = []
    skipped: list[Shard] = []  # step ranges the options leave out: the first runs if nothing else does

    def close_group():
        if group:
            shards.append(Shard(tuple(group), verify=not verified))
            group.clear()

    for rank in ranks:
        bounds = step_bounds(trace, rank) if events[rank] > limit and work.splits_by_step() else None
        if bounds and len(bounds) > 1:
            close_group()
            ranges = step_ranges(bounds, limit)
            kept = [r for r in ranges if _holds(r[0], wanted_steps)]
            skipped += [Shard((rank,), *r, verify=not verified) for r in ranges if not _holds(r[0], wanted_steps)]
            shards += [Shard((rank,), steps, records, verify=not verified and i == 0)
                       for i, (steps, records) in enumerate(kept)]
            continue
        if not (pack and group and sum(events[r] for r in group) + events[rank] <= limit):
            close_group()
        group.append(rank)
    close_group()
    return shards or skipped[:1]


def _options(work, model: str | None) -> dict:
    """The work's options for `model`, with the shard size for a model that maps in pieces."""
    return {**work.options, "shard_events": work.shard_events} if model in PIECEWISE_MODELS else work.options


def _agreed_model(work, facts: list[TraceFacts]):
    """`work` with the one model every trace gets; TraceError when they get different ones."""
    labels: dict[str | None, list[str]] = {}
    for fact in facts:
        labels.setdefault(fact.model, []).append(fact.label)
    if len(labels) > 1:
        listed = "; ".join(f"{model}: {', '.join(names)}" for model, names in labels.items())
        raise TraceError(f"the traces get different energy models by default ({listed}); name one (--model)")
    return dataclasses.replace(work, model=next(iter(labels)))


@dataclass(frozen=True)
class CountWork:
    """spiketrace.analyze.counters.count(trace, counters, **options) for every trace."""

    counters: tuple[str, ...] | None
    options: dict
    open_options: dict
    shard_events: int = SHARD_EVENTS

    add = staticmethod(add_counter_results)

    def splits_by_rank(self) -> bool:
        return True  # every counter is a sum over events (neuron_state's buffer size a max)

    def bounds_own_memory(self) -> bool:
        return True

    def splits_by_step(self) -> bool:
        """neuron_state replays neuron state across steps; NeuroBench's convention counts samples."""
        return self.options.get("convention") is None and all(
            name in STEP_ADDITIVE_COUNTERS for name in self.counters or STEP_ADDITIVE_COUNTERS)

    def facts(self, trace, label: str) -> TraceFacts:
        return read_facts(trace, label)

    def agreed(self, facts: list[TraceFacts]) -> CountWork:
        return self

    def evaluate(self, trace):
        return count(trace, None if self.counters is None else list(self.counters), **self.options)


@dataclass(frozen=True)
class EnergyWork:
    """spiketrace.analyze.energy.energy(trace, model, preset, overrides=..., **options) for every trace, as
    rows (EnergyPart). Model None: each trace's own (named by the preset, or the trace's default),
    which every trace must agree on. `documents`: each trace's report as JSON too (EnergyPart's
    `document`), what `energy --format json` prints of one trace."""

    model: str | None
    preset: object  # a shipped preset's name, a TOML path or a Preset; None: the model's default
    overrides: tuple
    options: dict
    open_options: dict
    shard_events: int = SHARD_EVENTS
    documents: bool = False

    add = staticmethod(add_energy_parts)

    def named_model(self) -> str | None:
        return self.model or (load_preset(self.preset).model if self.preset is not None else None)

    def splits_by_rank(self) -> bool:
        # A report's JSON document is not the sum of its shards' (NeuroMC's mapping summary lists
        # every fragment in trace order, its uncosted work is ranked and counted in a warning):
        # asked for, each trace is evaluated whole, as the in-process engine does
        if self.documents:
            return False
        model = self.named_model()
        return model is None or model in RANK_ADDITIVE_MODELS  # a trace's default is compute or neuromc

    def bounds_own_memory(self) -> bool:
        return self.named_model() in SELF_BOUNDED_MODELS

    def splits_by_step(self) -> bool:
        """strict refuses a selection in which nothing matched: a step range may hold none."""
        model = self.named_model()
        return (model is None or model in STEP_ADDITIVE_MODELS) and not self.options.get("strict")

    def facts(self, trace, label: str) -> TraceFacts:
        facts = read_facts(trace, label)
        facts.model = model_of(trace, self.model, [self.preset] if self.preset is not None else [])
        if self.options.get("compat") is None:  # as energy() warns: compat reproduces SpikingJelly, silent on scope
            facts.scope_warnings = scope_warnings(trace, facts.model, self.options.get("stage"))
        return facts

    def agreed(self, facts: list[TraceFacts]) -> EnergyWork:
        return _agreed_model(self, facts)

    def evaluate(self, trace) -> EnergyPart:
        # The scope warning is said once per trace, from its facts (a shard's op counts are its own)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = energy(trace, self.model, self.preset, overrides=self.overrides, **_options(self, self.model))
        said = [str(w.message) for w in caught if not issubclass(w.category, ModelScopeWarning)]
        return EnergyPart(report.to_frame(), list(dict.fromkeys([*(getattr(report, "warnings", None) or []), *said])),
                          report.to_json() if self.documents else None)


@dataclass(frozen=True)
class RecostWork:
    """spiketrace.analyze.energy.recost(trace, model, presets, sweep=, base=, **options) for every trace:
    each shard mapped once and costed under every preset, its rows (one per preset and
    breakdown entry) added per preset. Model None: as EnergyWork's (recost's choice)."""

    model: str | None
    presets: tuple
    sweep: dict | None
    base: object
    options: dict
    open_options: dict
    shard_events: int = SHARD_EVENTS

    def add(self, parts: list[EnergyPart], *, sizes: bool = False) -> EnergyPart:
        return add_energy_parts(parts, sizes=sizes, keys=("preset", *(self.sweep or ())))

    def named_model(self) -> str | None:
        named = [p for p in (self.base, *self.presets) if p is not None]
        return self.model or (load_preset(named[0]).model if named else None)

    def splits_by_rank(self) -> bool:
        return self.named_model() in RANK_ADDITIVE_MODELS  # None: agreed from the traces' facts first

    def bounds_own_memory(self) -> bool:
        return self.named_model() in SELF_BOUNDED_MODELS

    def splits_by_step(self) -> bool:
        return self.named_model() in STEP_ADDITIVE_MODELS and not self.options.get("strict")

    def facts(self, trace, label: str) -> TraceFacts:
        facts = read_facts(trace, label)
        facts.model = model_of(trace, self.model, self.presets, self.base, sweep_keys=list(self.sweep or ()))
        return facts

    def agreed(self, facts: list[TraceFacts]) -> RecostWork:
        return _agreed_model(self, facts)

    def evaluate(self, trace) -> EnergyPart:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ModelScopeWarning)
            frame = recost(trace, self.model, list(self.presets), sweep=self.sweep, base=self.base,
                           **_options(self, self.model))
        return EnergyPart(frame)


def plan(work, label: str) -> tuple[TraceFacts, list[Shard]]:
    """The facts of a whole trace and its shards (one per rank at least, for a cluster), before
    the shards run. Checksums are left to the shards, which verify the parts they read."""
    with open_trace(label, **{**work.open_options, "verify": False}) as trace:
        facts = work.facts(trace, label)
        return facts, plan_shards(work.agreed([facts]), trace, pack=False, verified=False)


def evaluate_shards(work, label: str, shards: list[Shard]) -> list:
    """The work's result for each of `shards` of trace `label`, which share their ranks: opened
    once (checking checksums if the first says so), each step range shown in turn."""
    verify = {} if shards[0].verify else {"verify": False}
    ranks = shards[0].ranks
    with open_trace(label, ranks=None if ranks is None else list(ranks), **{**work.open_options, **verify}) as trace:
        results = []
        for shard in shards:
            if shard.records is not None:
                restrict(trace, *shard.records)
            results.append(work.evaluate(trace))
        return results


def evaluate_shard(work, label: str, shard: Shard):
    """The work's result for one shard of trace `label` (a cluster task)."""
    return evaluate_shards(work, label, [shard])[0]


def evaluate_trace(work, label: str) -> tuple[TraceFacts, object]:
    """(facts, result) of trace `label`: evaluated whole, or, when it is large, shard after
    shard (plan_shards, packing ranks; a rank opened once for all its step ranges), the
    results added."""
    with open_trace(label, **work.open_options) as trace:
        facts = work.facts(trace, label)
        work = work.agreed([facts])
        shards = plan_shards(work, trace, pack=True, verified=True)
        if shards == [WHOLE]:
            return facts, work.evaluate(trace)
    results = []
    for _, of_ranks in itertools.groupby(shards, key=lambda shard: shard.ranks):
        results += evaluate_shards(work, label, list(of_ranks))
    return facts, work.add(results)
