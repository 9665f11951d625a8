"""The comparison of presets (spiketrace.analyze.energy.comparison) as a text table, Markdown,
CSV rows, a JSON document, a figure (a log-scale horizontal bar per preset, marked with its
grade and scope) and the HTML report's "chips and the paper convention" section.

    figure(comparison)    one bar per preset: chips above, the paper convention below them;
                          the colour is the model, the hatch the scope, the text grade and scope
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib.patches import Patch

from spiketrace.analyze.counters.neurobench.convention import MissingStatisticsError
from spiketrace.analyze.energy.comparison import Comparison, compare
from spiketrace.analyze.present.plots import _figure
from spiketrace.analyze.present.safe_text import safe_line
from spiketrace.analyze.present.units import energy_scale, format_energy

COLOURS = {"chip": "#4C72B0", "paper": "#DD8452", "paper (compute preset)": "#C9A66B"}
HATCHES = {"all-in": "", "per-term": "//", "minimum": "..", "compute only": "xx"}
SHOWN = ["model", "preset", "grade", "basis", "scope", "energy per sample", "uncosted"]


def _energy(pj: float, unit: str | None = None) -> str:
    return "-" if pj is None or not math.isfinite(pj) else format_energy(pj, unit=unit)


def display_frame(comparison: Comparison) -> pd.DataFrame:
    """The rows as shown: energy per sample as text, the source left to csv and json."""
    rows = comparison.rows
    return pd.DataFrame({"model": rows["model"], "preset": rows["preset"], "grade": rows["grade"],
                         "basis": rows["basis"], "scope": rows["scope"],
                         "energy per sample": [_energy(v) for v in rows["energy_per_sample_pj"]],
                         "uncosted": rows["uncosted"]}, columns=SHOWN)


def _headline(comparison: Comparison, scope: str = "") -> str:
    samples = comparison.samples
    return (f"energy per sample under {len(comparison.rows)} presets" + (f" ({scope})" if scope else "")
            + f": {samples if samples else 'unknown'} samples"
            + ("".join(f", {k.replace('_', ' ')} {v}" for k, v in comparison.options.items() if k != "samples")))


def text_table(comparison: Comparison, scope: str = "") -> str:
    frame = display_frame(comparison)
    widths = {c: max(len(c), *(len(str(v)) for v in frame[c])) if len(frame) else len(c) for c in SHOWN[:-1]}
    lines = [safe_line(_headline(comparison, scope)),
             "  ".join(c.ljust(widths[c]) if c != "energy per sample" else c.rjust(widths[c]) for c in SHOWN[:-1])
             + "  uncosted",
             "  ".join("-" * widths[c] for c in SHOWN[:-1]) + "  --------"]
    for row in frame.itertuples(index=False):
        cells = [str(v).rjust(widths[c]) if c == "energy per sample" else str(v).ljust(widths[c])
                 for c, v in zip(SHOWN[:-1], row[:-1])]
        lines.append(safe_line("  ".join(cells) + "  " + str(row[-1])))
    lines.append("grade and scope: the preset's provenance (spiketrace presets show NAME); scope all-in: one figure "
                 "holds everything, per-term: each term apart, minimum: a lower bound")
    return "\n".join(lines)


def markdown(comparison: Comparison) -> str:
    frame = display_frame(comparison)
    lines = [f"<!-- {safe_line(_headline(comparison))} -->", "| " + " | ".join(SHOWN) + " |",
             "|" + "|".join("---:" if c == "energy per sample" else "---" for c in SHOWN) + "|"]
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def json_document(comparison: Comparison, extra: dict[str, Any] | None = None) -> dict:
    return {**comparison.to_json(), **(extra or {})}


def figure(comparison: Comparison):
    """A log-scale horizontal bar per preset (energy per sample), chips first, each marked with
    its grade and scope (text beside the bar; the hatch is the scope)."""
    rows = comparison.rows[comparison.rows["energy_per_sample_pj"].notna()]
    rows = rows.assign(order=rows["model"].ne("chip")).sort_values("order", kind="stable")
    if not len(rows):
        raise ValueError("no energy per sample to draw: the samples are unknown (give --samples N)")
    values = rows["energy_per_sample_pj"].astype(float).clip(lower=1e-12)
    scale, unit = energy_scale(values)
    fig, axes = _figure(8.5, 1.2 + 0.42 * len(rows))
    positions = list(range(len(rows)))[::-1]  # the first row on top
    bars = axes.barh(positions, values / scale, color=[COLOURS.get(m, "#937860") for m in rows["model"]],
                     edgecolor="black", linewidth=0.6)
    for bar, scope in zip(bars, rows["scope"]):
        bar.set_hatch(HATCHES.get(scope, ""))
    axes.set_xscale("log")
    axes.set_yticks(positions, list(rows["preset"]))
    for position, value, grade, scope in zip(positions, values / scale, rows["grade"], rows["scope"]):
        axes.annotate(f" {'grade ' + grade if grade != '-' else 'no grade'}, {scope}", (value, position), va="center",
                      fontsize=8)
    low, high = float((values / scale).min()), float((values / scale).max())
    axes.set_xlim(low / 3, high * 30)  # room for the labels right of the longest bar
    axes.set_xlabel(f"energy per sample ({unit}, log scale)")
    axes.set_title(f"Energy per sample: chips and the paper convention ({comparison.samples} samples)")
    handles = [Patch(facecolor=c, edgecolor="black", label=m) for m, c in COLOURS.items() if m in set(rows["model"])]
    axes.legend(handles=handles, loc="lower right", fontsize=8)
    return fig


def report_section(analysis, options: dict, make_table, make_image) -> dict:
    """The report's section: {"table", "plot", "reason"}, or a one-line reason when the trace
    lacks the statistics the paper and chip models need. `make_table(frame, id, caption)` and
    `make_image(figure, alt)` are the report's own (analyze/present/report.py)."""
    try:
        comparison = compare(analysis.trace, activity_of=lambda model, **o: analysis.activity(model, **o), **options)
    except (MissingStatisticsError, ValueError) as problem:
        return {"table": None, "plot": None, "reason": f"not compared: {problem}"}
    try:
        plot = make_image(figure(comparison), "energy per sample per preset")
    except ValueError as problem:
        plot = {"alt": "energy per sample per preset", "src": "", "problem": str(problem)}
    caption = f"{_headline(comparison)}; static energy is included only with a time per step"
    return {"table": make_table(display_frame(comparison), "chip-comparison", caption), "plot": plot, "reason": ""}
