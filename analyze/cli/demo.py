"""`spiketrace demo`: capture the built-in spiking MLP's training step, then summarise it."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from analyze.cli.app import CommandUnavailable, main, warnings_to_stderr
from analyze.cli.trace_commands import print_info
from analyze.energy import DEFAULT_PRESETS, SCOPES
from analyze.present import counts as counts_view
from analyze.present.safe_text import safe_line
from analyze.present.units import format_energy
from analyze.results import Analysis
from schemas import layout


@main.command()
@click.argument("out", type=click.Path())
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
@click.option("--force", is_flag=True, help="Replace OUT when it already holds a spiketrace trace.")
def demo(out: str, output_format: str, force: bool) -> None:
    """Capture the built-in spiking MLP's training step into OUT and summarise it.

    Example: spiketrace demo /tmp/spiketrace-demo --force"""
    _make_room(Path(out), force)
    try:
        from capture.example import record_demo
    except ImportError as exc:
        raise CommandUnavailable(f"the demo needs the capture side and torch ({exc})") from exc
    with Analysis(record_demo(out)) as analysis:
        trace = analysis.trace
        print_info(trace, output_format)
        if output_format == "table":
            result = analysis.counts()
            click.echo("\noperation counts per module (offline, equal to SpikingJelly's counters):")
            click.echo(counts_view.table_text(result, "scope", 2, 3, coverage=counts_view.coverage(result)))
            model = analysis.model()  # a training step: the training model
            with warnings_to_stderr():
                report = analysis.energy(model)
            click.echo(f"\n{model} energy ({SCOPES[model].label}, {DEFAULT_PRESETS[model]}): "
                       f"{format_energy(report.energy_total_pj)}; by stage: "
                       + ", ".join(f"{safe_line(k)} {format_energy(v)}" for k, v in report.energy_by_stage.items()))
            click.echo(f"next: spiketrace counts {out} --by op | spiketrace energy {out} --by stage | "
                       f"spiketrace report {out} --out report.html")


def _make_room(out: Path, force: bool) -> None:
    """Refuse to overwrite without --force, and never delete what is not a trace."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not force:
        raise click.UsageError(f"{out} already exists; pass --force to replace the trace there")
    if out.is_symlink() or not layout.holds_manifest(out):
        raise click.UsageError(f"{out} is not a spiketrace trace; not deleting it (choose another OUT)")
    shutil.rmtree(out)
