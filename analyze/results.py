"""`Analysis`: one trace's results, each computed once.

The pipeline is capture -> trace -> activity -> cost -> present. Reading the trace into
activity (the counters' sums, an energy model's mapping) is the expensive step; costing an
activity under a preset is arithmetic. An Analysis holds one opened trace and caches

- counts per (counters, options): `analysis.counts(...)` -> CounterResult,
- activity per (model, options): `analysis.activity(model, ...)`,

so `analysis.energy(model, preset_a)` then `analysis.energy(model, preset_b)` map the
trace once, and the report, the plots and diff, which take an Analysis (or the results it
returns), never run an engine themselves.

    from spiketrace.analyze import Analysis
    with Analysis("runs/step") as analysis:
        analysis.energy("neuromc").energy_total_pj
        analysis.energy("neuromc", "my-preset.toml")     # re-costed, not re-mapped
        analysis.counts(["flop", "mac"]).frame
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from spiketrace.analyze.counters import ALL_COUNTERS, COUNTERS, CounterResult, count
from spiketrace.analyze.energy import default_model, map_activity, model_of
from spiketrace.analyze.energy import energy as cost_energy
from spiketrace.analyze.energy import recost as cost_recost
from spiketrace.analyze.trace import Trace, open_trace

# The counters a default `counts()` runs: the five op counters, so the report, roofline and
# diff all ask for (and share) the same cached result.
DEFAULT_COUNTERS = tuple(COUNTERS)
_BY_TRACE: weakref.WeakKeyDictionary[Trace, Analysis] = weakref.WeakKeyDictionary()


def _frozen(value: Any):
    """A hashable stand-in for an option value (lists, sets, dicts, classes)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _key(*parts, **options) -> tuple:
    return (*(_frozen(p) for p in parts), tuple(sorted((k, _frozen(v)) for k, v in options.items())))


class Analysis:
    """A trace and the results computed from it so far (see the module docstring)."""

    def __init__(self, trace: Trace | str | os.PathLike, **open_options) -> None:
        self._owns_trace = not isinstance(trace, Trace)
        self.trace = trace if isinstance(trace, Trace) else open_trace(trace, **open_options)
        self._counts: dict[tuple, CounterResult] = {}
        self._activities: dict[tuple, Any] = {}
        self.mapped: dict[str, int] = {}  # model -> how many times its trace mapping ran
        self._default_model: str | None = None

    @classmethod
    def of(cls, source) -> Analysis:
        """The Analysis of `source`: itself, the one shared by every caller of this opened
        Trace, or a new one over the trace at a path."""
        if isinstance(source, Analysis):
            return source
        if isinstance(source, Trace):
            if source not in _BY_TRACE:
                _BY_TRACE[source] = cls(source)
            return _BY_TRACE[source]
        return cls(source)

    @property
    def path(self):
        return self.trace.path

    def counts(self, counters=None, **options) -> CounterResult:
        """spiketrace.analyze.counters.count over this trace, once per (counters, options)."""
        names = DEFAULT_COUNTERS if counters is None else (counters,) if isinstance(counters, str) else tuple(counters)
        unknown = [n for n in names if n not in ALL_COUNTERS]
        if unknown:
            raise ValueError(f"unknown counter(s) {unknown}; choose from {sorted(ALL_COUNTERS)}")
        key = _key(names, **options)
        if key not in self._counts:
            self._counts[key] = count(self.trace, list(names), **options)
        return self._counts[key]

    def model(self, model: str | None = None, preset=None) -> str:
        """`model`; else the model of `preset`; else the trace's default (neuromc for a
        training trace, compute for inference)."""
        if model:
            return model
        if preset is not None:
            return model_of(self.trace, None, [preset])
        if self._default_model is None:
            self._default_model = default_model(self.trace)
        return self._default_model

    def activity(self, model: str | None = None, **options):
        """The model's preset-independent activity, mapped once per (model, options)."""
        model = self.model(model)
        key = _key(model, **options)
        if key not in self._activities:
            self._activities[key] = map_activity(self.trace, model, **options)
            self.mapped[model] = self.mapped.get(model, 0) + 1
        return self._activities[key]

    def energy(self, model: str | None = None, preset=None, *, overrides=(), **options):
        """The model's report under `preset` (re-costed from the cached activity); no model:
        the preset's, else the trace's default."""
        model = self.model(model, preset)
        return cost_energy(self.trace, model, preset, overrides=overrides, activity=self.activity(model, **options),
                           compat=options.get("compat"), strict=options.get("strict", False),
                           stage=options.get("stage"))

    def recost(self, model: str | None = None, presets=None, *, sweep=None, base=None, progress=None, **options):
        """spiketrace.analyze.energy.recost over the cached activity: one row per (preset, breakdown entry)."""
        model = model or model_of(self.trace, None, presets, base, sweep_keys=list(sweep or ()))
        return cost_recost(self.trace, model, presets, sweep=sweep, base=base, progress=progress,
                           activity=self.activity(model, **options), compat=options.get("compat"),
                           strict=options.get("strict", False))

    def close(self) -> None:
        if self._owns_trace:
            self.trace.close()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
