"""The work an engine runs: counting or costing one trace, or one shard of it (its ranks), with
the same in-process evaluation as a single trace (analyze.counters.count, analyze.energy.energy).

A work object holds the question (counters or model and preset, and their options) and how
to open traces (run=, verify=; a cluster worker has no CLI context to take them from). The
module-level functions are the tasks: `plan` reads a whole trace's facts (its ranks first), and
`evaluate` opens a trace, or the shard `open_trace(path, ranks=[r])`, and answers the question
for it. Everything they return is small: counts per scope and op, a report's rows.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

from analyze.counters import count
from analyze.energy import ModelScopeWarning, energy, load_preset, model_of
from analyze.energy.scopes import scope_warnings
from analyze.many.combine import RANK_ADDITIVE_MODELS, EnergyPart, add_counter_results, add_energy_parts
from analyze.many.traces import TraceFacts, read_facts
from analyze.trace import TraceError, open_trace


def _shard_ranks(ranks: list[int], selected) -> list[int]:
    """The ranks worth a shard when the options select some (`rank=`); one still runs when none
    is left, so that an empty selection gives the empty result it gives in one process."""
    if selected is None:
        return ranks
    wanted = set(selected) if isinstance(selected, (list, tuple, set)) else {selected}
    return [r for r in ranks if r in wanted] or ranks[:1]


@dataclass(frozen=True)
class CountWork:
    """analyze.counters.count(trace, counters, **options) for every trace."""

    counters: tuple[str, ...] | None
    options: dict
    open_options: dict

    add = staticmethod(add_counter_results)

    def splits_by_rank(self) -> bool:
        return True  # every counter is a sum over events (neuron_state's buffer size a max)

    def facts(self, trace, label: str) -> TraceFacts:
        return read_facts(trace, label)

    def agreed(self, facts: list[TraceFacts]) -> "CountWork":
        return self

    def shard_ranks(self, ranks: list[int]) -> list[int]:
        return _shard_ranks(ranks, self.options.get("rank"))

    def evaluate(self, trace):
        return count(trace, None if self.counters is None else list(self.counters), **self.options)


@dataclass(frozen=True)
class EnergyWork:
    """analyze.energy.energy(trace, model, preset, overrides=..., **options) for every trace, as
    rows (EnergyPart). Model None: each trace's own (named by the preset, or the trace's default),
    which every trace must agree on."""

    model: str | None
    preset: object  # a shipped preset's name, a TOML path or a Preset; None: the model's default
    overrides: tuple
    options: dict
    open_options: dict

    add = staticmethod(add_energy_parts)

    def named_model(self) -> str | None:
        return self.model or (load_preset(self.preset).model if self.preset is not None else None)

    def splits_by_rank(self) -> bool:
        model = self.named_model()
        return model is None or model in RANK_ADDITIVE_MODELS  # a trace's default is compute or neuromc

    def facts(self, trace, label: str) -> TraceFacts:
        facts = read_facts(trace, label)
        facts.model = model_of(trace, self.model, [self.preset] if self.preset is not None else [])
        if self.options.get("compat") is None:  # as energy() warns: compat reproduces SpikingJelly, silent on scope
            facts.scope_warnings = scope_warnings(trace, facts.model, self.options.get("stage"))
        return facts

    def agreed(self, facts: list[TraceFacts]) -> "EnergyWork":
        """This work with the one model every trace gets; TraceError when they get different ones."""
        labels: dict[str, list[str]] = {}
        for fact in facts:
            labels.setdefault(fact.model, []).append(fact.label)
        if len(labels) > 1:
            listed = "; ".join(f"{model}: {', '.join(names)}" for model, names in labels.items())
            raise TraceError(f"the traces get different energy models by default ({listed}); name one (--model)")
        return dataclasses.replace(self, model=next(iter(labels)))

    def shard_ranks(self, ranks: list[int]) -> list[int]:
        return _shard_ranks(ranks, self.options.get("rank"))

    def evaluate(self, trace) -> EnergyPart:
        # The scope warning is said once per trace, from its facts (a shard's op counts are its own)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = energy(trace, self.model, self.preset, overrides=self.overrides, **self.options)
        said = [str(w.message) for w in caught if not issubclass(w.category, ModelScopeWarning)]
        return EnergyPart(report.to_frame(), list(dict.fromkeys([*(getattr(report, "warnings", None) or []), *said])))


def plan(work, label: str) -> TraceFacts:
    """The facts of a whole trace, before its shards run. Checksums are left to the shards, which
    verify the parts they read."""
    with open_trace(label, **{**work.open_options, "verify": False}) as trace:
        return work.facts(trace, label)


def evaluate(work, label: str, ranks: list[int] | None = None):
    """(facts, result) of the whole trace (ranks None), or (None, result) of the shard of `ranks`."""
    with open_trace(label, ranks=ranks, **work.open_options) as trace:
        if ranks is not None:
            return None, work.evaluate(trace)
        facts = work.facts(trace, label)
        return facts, work.agreed([facts]).evaluate(trace)
