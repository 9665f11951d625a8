"""Counter and energy results as DuckDB tables next to a trace's views.

    register_counts(trace, result)   -> table `counts` (counter, scope, op, value [, groups])
    register_energy(trace, report)   -> table `energy` (model, preset, breakdown, key, pj, count)

and, once `energy` exists, the views of analyze/present/result_views/ over it (per stage,
module, component, and whatever breakdowns the model reports: core type, process key,
memory level and direction for NeuroMC). `ensure_for_query` registers them on demand when
a query names them, so `spiketrace sql TRACE "SELECT * FROM counts"` just works.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from spiketrace.analyze.results import Analysis
from spiketrace.analyze.trace.views import sql_views

RESULT_VIEW_DIR = Path(__file__).resolve().parent / "result_views"
_NAMES = re.compile(r"\b(?:from|join)\s+(counts|energy(?:_\w+)?)\b", re.IGNORECASE)


def result_views() -> dict[str, tuple[str, str]]:
    return sql_views(RESULT_VIEW_DIR)


def _replace_table(con, name: str, frame: pd.DataFrame) -> None:
    con.register("spiketrace_result_frame", frame)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM spiketrace_result_frame")
    con.unregister("spiketrace_result_frame")


def register_counts(trace, result) -> None:
    _replace_table(trace.con, "counts", result.frame)


def register_energy(trace, report, *, model: str, preset: str) -> None:
    frame = report.to_frame()
    frame.insert(0, "preset", preset)
    frame.insert(0, "model", model)
    frame["pj"] = frame["pj"].astype(float)
    frame["count"] = pd.to_numeric(frame["count"], errors="coerce")
    _replace_table(trace.con, "energy", frame)
    for name, (_, query) in result_views().items():
        trace.con.execute(f"CREATE OR REPLACE VIEW {name} AS {query}")


def ensure_for_query(trace, query: str, *, model: str | None = None, preset: str | None = None,
                     selection=None) -> None:
    """Register `counts` / `energy` (and its views) when `query` reads them and they are absent,
    from the trace's Analysis (computed once, shared with anything else asking it), of the
    `selection` (spiketrace.analyze.present.selection: a Selection or a mapping of filters) when given."""
    from spiketrace.analyze.present.selection import selection_of

    selection = selection_of(selection)
    wanted = {m.lower() for m in _NAMES.findall(query)}
    present = {row[0] for row in trace.con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    analysis = Analysis.of(trace)
    if "counts" in wanted and "counts" not in present:
        register_counts(trace, analysis.counts(by=("stage",), **selection.counts_options()))
    if any(w.startswith("energy") for w in wanted) and "energy" not in present:
        from spiketrace.analyze.energy import DEFAULT_PRESETS

        model = analysis.model(model, preset)
        chosen = preset or DEFAULT_PRESETS[model]
        report = analysis.energy(model, chosen, **selection.energy_options(trace))
        register_energy(trace, report, model=model, preset=chosen)
