"""spiketrace analyze: read a captured trace offline with DuckDB. Needs no torch.

    from spiketrace.analyze import Analysis, counts, energy, many, open_trace, recost
    with open_trace("run.trace") as trace:
        trace.sql("SELECT op, count(*) FROM events GROUP BY op")
        counts(trace, ["flop", "ac"], stage="forward")
        energy(trace, "neuromc").energy_total_pj       # spiketrace.analyze.energy is also callable
    with Analysis("run.trace") as analysis:              # each result computed once
        analysis.energy("neuromc", "neuromc-like-v1")
        analysis.energy("neuromc", "my-chip.toml")       # re-costed, not re-mapped
    many.count(["runs/seed=0", "runs/seed=1"]).totals_by_trace()   # several traces, added up and each

Every function that takes a trace also takes its path. The pipeline, one room each, a room
importing only the rooms before it (tests/test_layout.py): trace/ (open, check, views) ->
neurons.py (which modules are neurons) -> counters/ (activity) -> presets/ (what each action
costs) -> energy/ (activity x preset) -> many/ (several traces) -> results.py (Analysis:
computed once) -> present/ (tables, plots, report, diff) -> cli/; progress.py (the bars of
long commands) comes before them all.

The names below are imported on first use (PEP 562), so `import spiketrace.analyze.cli` stays light.
"""

from importlib import import_module

_PUBLIC = {
    "Analysis": ("spiketrace.analyze.results", "Analysis"),
    "Trace": ("spiketrace.analyze.trace", "Trace"),
    "TraceError": ("spiketrace.analyze.trace", "TraceError"),
    "count": ("spiketrace.analyze.counters", "count"),
    "counts": ("spiketrace.analyze.counters", "counts"),
    "energy": ("spiketrace.analyze.energy", None),  # the package, callable as energy(trace, model, preset, ...)
    "many": ("spiketrace.analyze.many", None),  # several traces at once: many.count(traces, ...), many.energy(traces, ...)
    "neurobench_metrics": ("spiketrace.analyze.counters", "neurobench_metrics"),
    "open_trace": ("spiketrace.analyze.trace", "open_trace"),
    "recost": ("spiketrace.analyze.energy", "recost"),
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'analyze' has no attribute {name!r}")
    module_name, attribute = _PUBLIC[name]
    module = import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
