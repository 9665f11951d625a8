"""What `spiketrace counts` and `energy` show for several traces (spiketrace.analyze.many's results): the
per-trace tables of `--by trace`, the per-trace rows of --format csv, and the JSON documents.

## counts --format json of several traces

    {
      "counters": {...},                 # as for one trace (docs/counts_json.md): every trace's counts added
      "traces": [                        # one entry per trace, in the order named
        {<the `trace` entry of one trace's document>, "label": str, "totals": {"<counter>": int}}
      ]
    }

With `--by trace` over one trace it is the document of one trace; one trace otherwise prints the
one-trace document, whatever the engine.

## energy --format json of several traces

    {
      "model": str, "scope": str, "preset": str, "energy_total_pj": float,
      "rows": [{"breakdown": str, "key": str, "pj": float, "count": int, ...}],  # report rows added; a
                                                                                 # missing value left out
      "warnings": [str],
      "traces": [{<the trace's facts as in counts>, "label": str, "energy_total_pj": float}],
      "selection": {...}                 # the filters given (--stage ...), only when some were
    }
"""

from __future__ import annotations

import math

import pandas as pd

from spiketrace.analyze.energy.breakdown import total_of
from spiketrace.analyze.present.counts import _grid, counters_json, coverage_text, tidy_frame, units_line, value_text
from spiketrace.analyze.present.energy_table import ordered_frame
from spiketrace.analyze.present.safe_text import safe, safe_line
from spiketrace.analyze.present.units import format_energy


def counts_by_trace_text(combined, names: list[str], fractions=None, top: int | None = None) -> str:
    """One row per trace (each counter's total), the total of all, then the coverage block of all."""
    rows = []
    for label, result in combined.by_trace.items():
        totals = result.totals()
        rows.append([label] + [value_text(n, totals.get(n, 0)) for n in names])
    grand = combined.total.totals()
    rows.append(["total"] + [value_text(n, grand.get(n, 0)) for n in names])
    lines = (_grid(["trace", *names], rows) + ["", units_line(names), ""]
             + coverage_text(combined.total, names, fractions, top))
    return safe("\n".join(lines))


def counts_by_trace_frame(combined, names: list[str]) -> pd.DataFrame:
    """Each trace's tidy frame (spiketrace.analyze.present.counts.tidy_frame) with a leading `trace` column."""
    frames = [tidy_frame(result, names).assign(trace=label) for label, result in combined.by_trace.items()]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["trace", *(c for c in frame.columns if c != "trace")]]


def counts_json_many(combined, names: list[str], selection=None) -> dict:
    """The counts document of several traces (see the module docstring); `selection`: the
    filters given ({name: value}), listed as `selection` when any."""
    counters = counters_json(combined.total, names)
    chosen = {"selection": dict(selection)} if selection else {}
    if len(combined.traces) == 1:
        return {"counters": counters, "trace": combined.traces[0].document, **chosen}
    traces = []
    for facts in combined.traces:
        totals = combined.by_trace[facts.label].totals()
        traces.append({**facts.document, "label": facts.label, "totals": {n: int(totals.get(n, 0)) for n in names}})
    return {"counters": counters, "traces": traces, **chosen}


def energy_by_trace_lines(combined, unit: str | None = None) -> list[str]:
    """trace, energy, share of the total: one row per trace, in the order named."""
    total = combined.energy_total_pj
    labels = [safe_line(label) for label in combined.by_trace]
    energies = [total_of(frame) for frame in combined.by_trace.values()]
    shares = [f"{100 * e / total:.1f}%" if total else "-" for e in energies]
    shown = [format_energy(e, unit=unit) for e in energies]
    width = max([len("trace"), *map(len, labels)])
    lines = [f"{'trace':<{width}}  {'energy':>14}  {'share':>6}"]
    lines += [f"{label:<{width}}  {energy:>14}  {share:>6}" for label, energy, share in zip(labels, shown, shares)]
    return lines


def energy_by_trace_frame(combined) -> pd.DataFrame:
    """Each trace's report rows with a leading `trace` column."""
    frames = [ordered_frame(frame).assign(trace=label) for label, frame in combined.by_trace.items()]
    frame = pd.concat(frames, ignore_index=True)
    return frame[["trace", *(c for c in frame.columns if c != "trace")]]


def _present(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def energy_json_many(combined, scope: str, selection=None) -> dict:
    """The energy document of several traces (see the module docstring); `selection`: the
    filters given, listed as `selection` when any."""
    rows = [{k: (int(v) if k == "count" else v) for k, v in row.items() if _present(v)}
            for row in ordered_frame(combined.frame).to_dict("records")]
    traces = [{**facts.document, "label": facts.label, "energy_total_pj": total_of(combined.by_trace[facts.label])}
              for facts in combined.traces]
    return {"model": combined.model, "scope": scope, "preset": combined.preset,
            "energy_total_pj": combined.energy_total_pj, "rows": rows, "warnings": list(combined.warnings),
            "traces": traces, **({"selection": dict(selection)} if selection else {})}
