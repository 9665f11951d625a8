"""`spiketrace plot TRACE KIND --out FILE`: a thin command over spiketrace.analyze.present.plots."""

from __future__ import annotations

import click
import pandas as pd

from spiketrace.analyze.cli.app import main, model_option, selection_options, trace_options, warnings_to_stderr
from spiketrace.analyze.results import Analysis

KINDS = ("energy", "stages", "spikes", "training", "roofline", "sweep", "sweep-heatmap", "compare")


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.argument("kind", type=click.Choice(KINDS))
@selection_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The figure: FILE.png, .svg, .pdf or .html.")
@model_option("Energy model (energy, stages, training, compare)")
@click.option("--preset", metavar="NAME|FILE", help="Preset (energy, stages, training, compare).")
@click.option("--recost", "recost_path", type=click.Path(exists=True, dir_okay=False),
              help="sweep, sweep-heatmap: a `spiketrace recost` result (.parquet or .csv).")
@click.option("--x", "x_key", metavar="KEY", help="sweep, sweep-heatmap: the swept key on the x axis.")
@click.option("--y", "y_key", metavar="KEY", help="sweep-heatmap: the swept key on the y axis.")
@click.option("--other", type=click.Path(), help="compare: the second trace (without it: the trace's energy per sample "
              "under every chip preset of grade A or B and the paper convention, as `spiketrace compare --plot`).")
@click.option("--peak-flops", type=float, help="roofline: peak FLOP/s of the target machine.")
@click.option("--bandwidth", type=float, help="roofline: memory bandwidth in byte/s.")
def plot(trace_path, kind, selection, out, model, preset, recost_path, x_key, y_key, other, peak_flops, bandwidth):
    """Draw one figure of TRACE (or of a recost result) into --out.

    With filters, the figure of that part of the trace: energy, stages, training and compare
    take --stage, --phase, --step, --rank (a model costs whole stages: --module is refused);
    spikes and roofline take all five. A bar shows the progress on a terminal.

    Example: spiketrace plot runs/step energy --out energy.png; spiketrace plot runs/step spikes --rank 0 --out s.png"""
    from spiketrace.analyze.present import plots
    from spiketrace.analyze.progress import steps

    if kind in ("sweep", "sweep-heatmap") and selection:
        raise click.UsageError(f"{kind} draws a recost result: select the work when running `spiketrace recost` "
                               "(its --stage, --phase, --step, --rank)")
    if kind in ("sweep", "sweep-heatmap"):
        if not recost_path or not x_key or (kind == "sweep-heatmap" and not y_key):
            raise click.UsageError(f"{kind} needs --recost FILE and --x KEY" + (" and --y KEY" if kind != "sweep" else ""))
        frame = pd.read_csv(recost_path) if recost_path.endswith(".csv") else pd.read_parquet(recost_path)
        for key in filter(None, (x_key, y_key)):
            if key not in frame.columns:
                raise click.UsageError(f"{recost_path} has no swept column {key!r}")
        figure = plots.sweep_curves(frame, x_key) if kind == "sweep" else plots.sweep_heatmap(frame, x_key, y_key)
        click.echo(f"wrote {plots.save(figure, out)}")
        return
    with steps(2, "plot", enabled=True) as bar, Analysis(trace_path) as analysis, warnings_to_stderr():
        bar.step(kind)
        if kind != "compare":
            selection.check(analysis.trace)
        if kind == "energy":
            figure = plots.energy_by_layer(analysis, model, preset, selection=selection)
        elif kind == "stages":
            figure = plots.stage_breakdown(analysis, model, preset, selection=selection)
        elif kind == "spikes":
            figure = plots.spike_rate_heatmap(analysis, selection=selection)
        elif kind == "training":
            figure = plots.training_curve(analysis, model, preset, selection=selection)
        elif kind == "roofline":
            figure = plots.roofline(analysis, peak_flops=peak_flops, bandwidth=bandwidth, selection=selection)
        else:
            if not other:  # no second trace: the trace under the chips and the paper convention's presets
                figure = _presets_figure(analysis, selection)
                bar.step("saving")
                click.echo(f"wrote {plots.save(figure, out)}")
                return
            with Analysis(other) as second:
                selection.check(analysis.trace, second.trace)
                figure = plots.compare(analysis, second, model, preset, labels=(trace_path, other), selection=selection)
        bar.step("saving")
        written = plots.save(figure, out)
    click.echo(f"wrote {written}")


def _presets_figure(analysis, selection):
    """`plot TRACE compare` without --other: spiketrace.analyze.present.comparison.figure."""
    from spiketrace.analyze.counters.neurobench.convention import MissingStatisticsError
    from spiketrace.analyze.energy.comparison import compare
    from spiketrace.analyze.present.comparison import figure

    selection.check(analysis.trace)
    try:
        return figure(compare(analysis.trace, activity_of=lambda model, **o: analysis.activity(model, **o),
                              **selection.energy_options(analysis.trace)))
    except (MissingStatisticsError, ValueError) as problem:
        raise click.UsageError(str(problem)) from None
