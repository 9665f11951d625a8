"""`spiketrace demo`: capture the built-in spiking MLP's training step, then summarise it."""

from __future__ import annotations

import contextlib
import shlex
import shutil
from pathlib import Path

import click

from spiketrace.analyze.cli.app import CommandUnavailable, main, warnings_to_stderr
from spiketrace.analyze.cli.trace_commands import print_info
from spiketrace.analyze.energy import DEFAULT_PRESETS, selection_label
from spiketrace.analyze.present import counts as counts_view
from spiketrace.analyze.present.safe_text import safe_line
from spiketrace.analyze.present.units import format_energy
from spiketrace.analyze.results import Analysis
from spiketrace.schemas import layout


@main.command()
@click.argument("out", type=click.Path())
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="Output: table: the summary, counts and energy as text; json: the info document of the trace.")
@click.option("--force", is_flag=True, help="Replace OUT when it already holds a spiketrace trace.")
def demo(out: str, output_format: str, force: bool) -> None:
    """Capture the built-in spiking MLP's training step into OUT and summarise it.

    A bar shows the progress on a terminal. Then try the filters of every command:
    spiketrace counts OUT --phase backward, spiketrace energy OUT --by stage --step 0.

    Example: spiketrace demo /tmp/spiketrace-demo --force"""
    from spiketrace.analyze.progress import steps

    _make_room(Path(out), force)
    try:
        from spiketrace.capture.session.example import record_demo
    except ImportError as exc:
        raise CommandUnavailable(f"the demo needs the capture side and torch ({exc})") from exc
    with contextlib.ExitStack() as stack:
        with steps(1 if output_format == "json" else 3, "demo", enabled=True) as bar:  # then print: no bar in between
            bar.step("capturing")
            analysis = stack.enter_context(Analysis(record_demo(out)))
            if output_format == "table":
                bar.step("counting")
                result = analysis.counts()
                bar.step("costing")
                model = analysis.model()  # a training step: the training model
                with warnings_to_stderr():
                    report = analysis.energy(model)
        print_info(analysis.trace, output_format)
        if output_format == "table":
            click.echo("\noperation counts per module (offline, equal to SpikingJelly's counters):")
            click.echo(counts_view.table_text(result, "scope", 2, 3, coverage=counts_view.coverage(result)))
            click.echo(f"\n{model} energy ({selection_label(analysis.trace, model)}, {DEFAULT_PRESETS[model]}): "
                       f"{format_energy(report.energy_total_pj)}; by stage: "
                       + ", ".join(f"{safe_line(k)} {format_energy(v)}" for k, v in report.energy_by_stage.items()))
            click.echo("\nnext, try:\n" + "\n".join(f"  {command}" for command in next_commands(out)))


def next_commands(out: str) -> list[str]:
    """What to try on the demo's trace, each a shell command of its own (OUT quoted for the shell)."""
    trace = safe_line(shlex.quote(out))
    return [f"spiketrace counts {trace} --by op", f"spiketrace energy {trace} --by stage",
            f"spiketrace report {trace} --out report.html"]


def _make_room(out: Path, force: bool) -> None:
    """Refuse to overwrite without --force, and never delete what is not a trace."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not force:
        raise click.UsageError(f"{out} already exists; pass --force to replace the trace there")
    if out.is_symlink() or not layout.holds_manifest(out):
        raise click.UsageError(f"{out} is not a spiketrace trace; not deleting it (choose another OUT)")
    shutil.rmtree(out)
