"""spiketrace analyze: read a captured trace offline with DuckDB. Needs no torch.

    from analyze import Analysis, counts, energy, open_trace, recost
    with open_trace("run.trace") as trace:
        trace.sql("SELECT op, count(*) FROM events GROUP BY op")
        counts(trace, ["flop", "ac"], stage="forward")
        energy(trace, "neuromc").energy_total_pj       # analyze.energy is also callable
    with Analysis("run.trace") as analysis:              # each result computed once
        analysis.energy("neuromc", "neuromc-like-v1")
        analysis.energy("neuromc", "my-chip.toml")       # re-costed, not re-mapped

The pipeline, one room each: trace/ (open, check, views) -> counters/ and energy/ (activity)
-> presets/ (what each action costs) -> results.py (Analysis: computed once) -> present/
(tables, plots, report, diff) -> cli/.
"""

from analyze import energy  # the package; callable as energy(trace, model, preset, ...)
from analyze.counters import count, counts
from analyze.energy import recost
from analyze.results import Analysis
from analyze.trace import Trace, TraceError, open_trace

__all__ = ["Analysis", "Trace", "TraceError", "count", "counts", "energy", "open_trace", "recost"]
