"""`spiketrace diff A B` and `spiketrace report TRACE`: thin commands over spiketrace.analyze.present.diff /
spiketrace.analyze.present.report."""

from __future__ import annotations

import sys

import click

from spiketrace.analyze.cli.app import (
    _warn,
    emit_frame,
    emit_text,
    main,
    model_option,
    output_options,
    selection_options,
    trace_options,
    warnings_to_stderr,
)
from spiketrace.analyze.present.diff import ConditionError, diff_traces
from spiketrace.analyze.present.safe_text import json_text, safe_line
from spiketrace.analyze.present.units import format_metric
from spiketrace.analyze.results import Analysis


def _change(relative) -> str:
    if relative is None or relative != relative:
        return "new"
    return f"{100 * relative:+.1f}%"


@main.command()
@trace_options
@click.argument("trace_a", metavar="A", type=click.Path())
@click.argument("trace_b", metavar="B", type=click.Path())
@selection_options
@model_option("Energy model")
@click.option("--preset", metavar="NAME|FILE", help="Preset for the energy (default: the model's).")
@click.option("--fail-if", "conditions", multiple=True, metavar="COND",
              help="Exit 1 when COND holds, e.g. 'energy.total>+5%' or 'counts.mac>1000' (repeatable).")
@click.option("--top", type=click.IntRange(min=0), default=15, show_default=True, help="Changed per-module rows shown.")
@output_options("table", "csv", "json", "parquet")
def diff(trace_a, trace_b, selection, model, preset, conditions, top, output_format, out):
    """What changed from trace A to trace B; exit 1 when a --fail-if holds.

    Compares model, counts, energy and spike rates; with filters, of the same part of both
    (--stage, --phase, --step, --rank; --module is refused, as energy is compared). csv and
    parquet hold every compared number (metric, scope, a, b, delta, relative).

    Example: spiketrace diff base/ new/ --fail-if 'energy.total>+5%' --fail-if 'energy.total>2uJ'"""
    with Analysis(trace_a) as a, Analysis(trace_b) as b, warnings_to_stderr():
        result = diff_traces(a, b, model=model, preset=preset, selection=selection)
    try:
        failed = result.failures(conditions)
    except ConditionError as problem:
        click.echo(f"error: {safe_line(problem)}", err=True)
        sys.exit(2)
    if output_format == "json":
        document = result.to_json()
        document["failed_conditions"] = failed
        emit_text(json_text(document, indent=2), out)
    elif output_format in ("csv", "parquet"):
        emit_frame(result.metrics, output_format, out)
    else:
        emit_text("\n".join(_diff_lines(result, top, selection)), out)
    for sentence in failed:
        click.echo(f"FAIL: {safe_line(sentence)}", err=True)
    if failed:
        sys.exit(1)


def _diff_lines(result, top: int, selection) -> list[str]:
    same = "same model" if result.same_model else f"model changed in {len(result.changed_modules())} module(s)"
    lines = [f"A: {safe_line(result.a)}", f"B: {safe_line(result.b)}", same]
    if selection:
        lines.append(f"compared: {safe_line(selection.describe())}")
    lines += [safe_line(f"  {path}: {x or '-'} -> {y or '-'}") for path, (x, y) in list(result.changed_modules().items())[:top]]
    frame = result.metrics
    totals = frame[frame["scope"] == "Global"]
    lines.append("\ntotals")
    for row in totals.itertuples():
        a, b = format_metric(row.metric, row.a), format_metric(row.metric, row.b)
        lines.append(f"  {row.metric:<28} {a:>14} -> {b:<14} {_change(row.relative)}")
    changed = frame[(frame["scope"] != "Global") & (frame["delta"] != 0)].copy()
    changed["size"] = changed["relative"].map(lambda r: float("inf") if r is None or r != r else abs(r))
    # largest change first; equal changes by metric and scope, so the rows shown never vary
    changed = changed.sort_values(["size", "metric", "scope"], ascending=[False, True, True], kind="stable").head(top)
    lines.append(f"\nlargest per-module changes ({len(changed)} shown)")
    for row in changed.itertuples():
        a, b = format_metric(row.metric, row.a), format_metric(row.metric, row.b)
        lines.append(f"  {row.metric:<20} {safe_line(row.scope):<32} {a:>14} -> {b:<14} {_change(row.relative)}")
    return lines


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@selection_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The page to write, e.g. report.html.")
@model_option("Energy model")
@click.option("--preset", metavar="NAME|FILE", help="Preset for the energy (default: the model's).")
def report(trace_path, selection, out, model, preset):
    """One self-contained HTML page: summary, caveats, breakdowns, plots.

    With filters, a page of that part of the trace (--stage, --phase, --step, --rank; --module
    is refused, as the page is about energy). A bar shows the progress on a terminal.

    Example: spiketrace report runs/step --out report.html; spiketrace report runs/step --phase backward --out bwd.html"""
    from spiketrace.analyze.present.report import write_report

    with Analysis(trace_path) as analysis, warnings_to_stderr():
        _warn(analysis.trace)  # the page opens with it too, as a banner
        path = write_report(analysis, out, model=model, preset=preset, selection=selection, progress=True)
    click.echo(f"wrote {path}")
