"""Which value-statistics level a trace was captured at, and the level each analysis needs.

The capture takes nnz/is01 at one of the levels of schemas/statistics_levels.py and writes
the level in every rank's manifest (settings.value_statistics; old manifests hold a bool).
A rule that reads a statistic the capture did not take would read null as "not a spike":
so each analysis declares the level it needs here, and refuses a trace taken at a lower one
with the reason and the fix, instead of returning a number that is silently wrong.
"""

from __future__ import annotations

from spiketrace.schemas.statistics_levels import LEVELS, covers, level_of

# analysis -> the least level whose statistics its rules read.
NEEDED_LEVEL: dict[str, str] = {
    "counter flop": "none",
    "counter memory_access": "none",
    "counter synop": "synaptic",   # spikes of synaptic inputs
    "counter ac": "synaptic",      # ... and of element-wise adds
    "counter mac": "synaptic",     # a binary operand makes a GEMM's MACs ACs
    "counter neuromorphic_memory_access": "synaptic",  # layer inputs at forward hooks
    "counter neuron_state": "full",  # every operand of every op inside a neuron
    "model compute": "synaptic",
    "model lemaire": "synaptic",
    "model spikesim": "synaptic",
    "model paper": "synaptic",     # nnz and 0/1-ness of synaptic inputs, NeuroBench's pairs
    "model neuromc": "full",       # maps any op with a spiking operand
}


class InsufficientStatisticsError(ValueError):
    """The trace was captured at a statistics level below what the analysis needs."""


def trace_level(trace) -> str:
    """The lowest level of any rank of the trace (a rank's own setting, as its manifest says)."""
    levels = [level_of(m.get("settings", {}).get("value_statistics", True)) for m in trace.manifests.values()]
    return min(levels, key=LEVELS.index) if levels else "full"


def require_level(trace, analysis: str) -> None:
    """Raise InsufficientStatisticsError if `trace` lacks the statistics `analysis` reads."""
    needed = NEEDED_LEVEL.get(analysis, "full")
    level = trace_level(trace)
    if not covers(level, needed):
        raise InsufficientStatisticsError(
            f"{trace.path}: {analysis} needs value statistics at level '{needed}', but the trace was captured "
            f"with value_statistics='{level}'; capture again with Recorder(..., value_statistics='{needed}')"
            + (" (or 'full')" if needed != "full" else "")
        )
