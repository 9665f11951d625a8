"""`spiketrace diff A B` and `spiketrace report TRACE`: thin commands over analyze.present.diff / analyze.present.report."""

from __future__ import annotations

import sys

import click

from analyze.cli.app import _warn, main, model_option, trace_options, warnings_to_stderr
from analyze.present.diff import ConditionError, diff_traces
from analyze.present.safe_text import json_text, safe_line
from analyze.present.units import format_metric
from analyze.results import Analysis


def _change(relative) -> str:
    if relative is None or relative != relative:
        return "new"
    return f"{100 * relative:+.1f}%"


@main.command()
@trace_options
@click.argument("trace_a", metavar="A", type=click.Path())
@click.argument("trace_b", metavar="B", type=click.Path())
@model_option("Energy model")
@click.option("--preset", metavar="NAME|FILE", help="Preset for the energy (default: the model's).")
@click.option("--fail-if", "conditions", multiple=True, metavar="COND",
              help="Exit 1 when COND holds, e.g. 'energy.total>+5%' or 'counts.mac>1000' (repeatable).")
@click.option("--top", type=int, default=15, show_default=True, help="Changed per-module rows shown.")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def diff(trace_a, trace_b, model, preset, conditions, top, output_format):
    """What changed from trace A to trace B; exit 1 when a --fail-if holds.

    Compares model, counts, energy and spike rates.
    Example: spiketrace diff base/ new/ --fail-if 'energy.total>+5%' --fail-if 'energy.total>2uJ'"""
    with Analysis(trace_a) as a, Analysis(trace_b) as b, warnings_to_stderr():
        result = diff_traces(a, b, model=model, preset=preset)
    try:
        failed = result.failures(conditions)
    except ConditionError as problem:
        click.echo(f"error: {safe_line(problem)}", err=True)
        sys.exit(2)
    if output_format == "json":
        document = result.to_json()
        document["failed_conditions"] = failed
        click.echo(json_text(document, indent=2))
    else:
        same = "same model" if result.same_model else f"model changed in {len(result.changed_modules())} module(s)"
        click.echo(f"A: {safe_line(result.a)}\nB: {safe_line(result.b)}\n{same}")
        for path, (x, y) in list(result.changed_modules().items())[:top]:
            click.echo(safe_line(f"  {path}: {x or '-'} -> {y or '-'}"))
        frame = result.metrics
        totals = frame[frame["scope"] == "Global"]
        click.echo("\ntotals")
        for row in totals.itertuples():
            a, b = format_metric(row.metric, row.a), format_metric(row.metric, row.b)
            click.echo(f"  {row.metric:<28} {a:>14} -> {b:<14} {_change(row.relative)}")
        changed = frame[(frame["scope"] != "Global") & (frame["delta"] != 0)].copy()
        changed["size"] = changed["relative"].map(lambda r: float("inf") if r is None or r != r else abs(r))
        changed = changed.sort_values("size", ascending=False).head(top)
        click.echo(f"\nlargest per-module changes ({len(changed)} shown)")
        for row in changed.itertuples():
            a, b = format_metric(row.metric, row.a), format_metric(row.metric, row.b)
            click.echo(f"  {row.metric:<20} {safe_line(row.scope):<32} {a:>14} -> {b:<14} {_change(row.relative)}")
        for sentence in failed:
            click.echo(f"FAIL: {safe_line(sentence)}", err=True)
    if failed:
        sys.exit(1)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="report.html")
@model_option("Energy model")
@click.option("--preset", metavar="NAME|FILE")
def report(trace_path, out, model, preset):
    """One self-contained HTML page: summary, caveats, breakdowns, plots.

    Example: spiketrace report runs/step --out report.html"""
    from analyze.present.report import write_report

    with Analysis(trace_path) as analysis, warnings_to_stderr():
        _warn(analysis.trace)  # the page opens with it too, as a banner
        path = write_report(analysis, out, model=model, preset=preset)
    click.echo(f"wrote {path}")
