"""Two tables of the report built straight from a trace or a result: each spiking layer's
spike rate (dead layers noted, non-spiking leaf layers named) and the work a model left
uncosted."""

from __future__ import annotations

import pandas as pd


def spike_rates(trace) -> tuple[pd.DataFrame, str]:
    """Per spiking layer and stage (all ranks) its rate, its class and a note when it never fired (a dead layer);
    and a sentence naming the leaf layers whose outputs are not spikes."""
    rates = trace.sql("SELECT scope, any_value(class_name) AS class, stage, sum(calls)::BIGINT AS calls, "
                      "sum(ones)::BIGINT AS ones, sum(elements)::BIGINT AS elements, "
                      "round(sum(ones) / sum(elements), 4) AS spike_rate "
                      "FROM layer_spike_rates GROUP BY scope, stage ORDER BY scope, stage")
    rates["note"] = rates["ones"].map(lambda ones: "dead: never fired" if ones == 0 else "")
    leaves = trace.sql("SELECT coalesce(m.tracker_name, m.path) AS scope, any_value(m.class_name) AS class FROM modules m "
                       "WHERE m.is_leaf AND EXISTS (SELECT 1 FROM module_events e WHERE e.rank = m.rank "
                       "AND e.module_id = m.module_id AND e.kind = 'forward_post') GROUP BY ALL ORDER BY scope")
    others = leaves[~leaves["scope"].isin(set(rates["scope"]))]
    quiet = ("Not spiking (outputs not 0/1): " + ", ".join(f"{s} ({c})" for s, c in zip(others["scope"], others["class"]))
             if len(others) else "")
    return rates, quiet


def left_out(report) -> pd.DataFrame:
    """The work the model could not cost, one row each (NeuroMC's uncosted, the others' unsupported)."""
    for name in ("uncosted", "unsupported"):
        value = getattr(report, name, None)
        frame = value if isinstance(value, pd.DataFrame) else pd.DataFrame(value or [])
        if len(frame):
            keep = [c for c in ("kind", "name", "scope", "class_name", "calls", "stages", "modules", "reason")
                    if c in frame.columns]
            return frame[keep]
    return pd.DataFrame()
