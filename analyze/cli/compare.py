"""`spiketrace compare TRACE`: the trace's energy per sample under many presets, the chips beside
the paper convention (spiketrace.analyze.energy.comparison), as a table, CSV, JSON or Markdown,
and with --plot FILE the figure (spiketrace.analyze.present.comparison.figure)."""

from __future__ import annotations

import click

from spiketrace.analyze.cli.app import _warn, emit_frame, emit_text, main, output_options, selection_options, trace_options
from spiketrace.analyze.present.safe_text import json_text, safe_line


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@selection_options
@click.option("--preset", "presets", multiple=True, metavar="NAME|FILE",
              help="A chip, paper or compute preset (repeatable; default: every chip preset of grade A or B and every "
                   "paper preset).")
@click.option("--samples", type=click.IntRange(min=1), metavar="N",
              help="Samples to divide by (default: NeuroBench's rule, each batch's batch dimension, summed).")
@click.option("--time-steps", type=click.IntRange(min=1), metavar="T",
              help="Time steps per sample (default: inferred; the chips' time per sample uses it).")
@click.option("--step-time", metavar="TIME",
              help="The chips' time per step (1ms, 250us): charges static power and time-based figures.")
@click.option("--host", metavar="PRESET", help="The preset (its e_mac_pj) that costs the work a chip cannot do as events.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also draw the figure: a log-scale bar per preset (.png, .svg, .pdf or .html).")
@output_options("table", "csv", "json", "markdown")
def compare(trace_path, selection, presets, samples, time_steps, step_time, host, plot_path, output_format, out):
    """Energy per sample of TRACE under chip presets and the paper convention, one row per preset.

    Each model reads the trace once (the paper convention's layers, the chip's events); every
    preset re-costs that. Each row names the preset's grade, basis (measured or simulated) and
    scope, and what it leaves uncosted (host work, static energy without --step-time, ...).

    Example: spiketrace compare runs/eval --samples 8 --plot compare.png"""
    from spiketrace.analyze.counters.neurobench.convention import MissingStatisticsError
    from spiketrace.analyze.energy.chip import parse_step_time
    from spiketrace.analyze.energy.comparison import compare as compare_presets
    from spiketrace.analyze.present import comparison as present
    from spiketrace.analyze.present.plots import save
    from spiketrace.analyze.results import Analysis

    try:
        parse_step_time(step_time)
    except ValueError as problem:
        raise click.BadParameter(str(problem), param_hint="--step-time") from None
    with Analysis(trace_path) as analysis:
        trace = analysis.trace
        _warn(trace)
        selection.check(trace)
        try:
            result = compare_presets(trace, list(presets) or None, samples=samples, time_steps=time_steps,
                                     step_time=step_time, host=host, **selection.energy_options(trace),
                                     activity_of=lambda model, **o: analysis.activity(model, **o))
        except (MissingStatisticsError, ValueError) as problem:
            raise click.UsageError(str(problem)) from None
    for note in result.notes:
        click.echo(f"note: {safe_line(note)}", err=True)
    if output_format == "json":
        extra = {"trace": str(trace_path), **({"selection": selection.as_dict()} if selection else {})}
        emit_text(json_text(present.json_document(result, extra), indent=2, default=str), out)
    elif output_format == "csv":
        emit_frame(result.rows, "csv", out)
    elif output_format == "markdown":
        emit_text(present.markdown(result), out)
    else:
        emit_text(present.text_table(result, selection.describe() if selection else ""), out)
    if plot_path:
        click.echo(f"wrote {save(present.figure(result), plot_path)}", err=True)
