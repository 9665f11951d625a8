"""`spiketrace demo`: capture the built-in spiking MLP's training step, then summarise it."""

from __future__ import annotations

import click

from analyze.cli.app import CommandUnavailable, main
from analyze.cli.trace_commands import print_info
from analyze.counters import count
from analyze.present import counts as counts_view
from analyze.present.units import format_energy
from analyze.trace import open_trace


@main.command()
@click.argument("out", type=click.Path())
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def demo(out: str, output_format: str) -> None:
    """Capture a small spiking network's training step into OUT, then summarise it."""
    try:
        from capture.example import record_demo
    except ImportError as exc:
        raise CommandUnavailable(f"the demo needs the capture side and torch ({exc})") from exc
    with open_trace(record_demo(out)) as trace:
        print_info(trace, output_format)
        if output_format == "table":
            from analyze.energy import energy

            result = count(trace)
            click.echo("\noperation counts per module (offline, equal to SpikingJelly's counters):")
            click.echo(counts_view.table_text(result, "scope", 2, 3, coverage=counts_view.coverage(result)))
            report = energy(trace, "compute", "compute-fp32-45nm")
            click.echo(f"\ncompute energy (compute-fp32-45nm): {format_energy(report.energy_total_pj)}; by stage: "
                       + ", ".join(f"{k} {format_energy(v)}" for k, v in report.energy_by_stage.items()))
            click.echo(f"next: spiketrace counts {out} --by op | spiketrace energy {out} --by stage | "
                       f"spiketrace report {out} --out report.html")


