"""`spiketrace energy`, `recost` and `presets`: thin commands over analyze.energy.

`energy --format json` prints the report's fields (the model's `Report.to_json()`, SpikingJelly's
field names), with `model`, `scope` and `trace` (path, complete, and Trace.health(): degraded,
compiled, compiled_seen, tracker_underflows); `presets show --format json` prints
`Preset.to_json()`, whose dotted parameter keys are the ones `--set` and `recost --sweep` take.
"""

from __future__ import annotations

import sys

import click
import numpy as np
import pandas as pd

from analyze import energy as energy_models
from analyze.energy import list_presets, load_preset, read_preset_file
from analyze.cli.app import (_table, _warn, engine_options, main, model_option, recompute_option, trace_options,
                             warn_traces, warnings_to_stderr)
from analyze.present.safe_text import json_text, safe_line
from analyze.present.counts import module_classes, short_class
from analyze.energy.scopes import recompute_default
from analyze.present.energy_table import energy_text, energy_views, total_of
from analyze.present.health import recompute_note, recomputed_events
from analyze.present.units import UNIT_CHOICES, format_energy
from analyze.many.traces import find_traces
from analyze.results import Analysis


def _headline_values(frame):
    """Non-energy totals a model reports (SpikeSim's area_mm2, latency_ms) as (key, value, unit)."""
    if "value" not in frame.columns:
        return []
    rows = frame[(frame["breakdown"] == "total") & frame["pj"].isna() & frame["value"].notna()]
    return [(k, float(v), u if "unit" in frame.columns else "") for k, v, u in
            zip(rows["key"], rows["value"], rows["unit"] if "unit" in frame.columns else [""] * len(rows))]


def _progress(items):
    if not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    return tqdm(items, desc="presets", unit="preset", file=sys.stderr)


@main.command()
@trace_options
@engine_options
@click.argument("trace_paths", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@model_option()
@click.option("--preset", metavar="NAME|FILE", help="Shipped preset name or TOML file (default: the model's).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a preset parameter, e.g. e_mac_pj=3.1 or 'memory.sram_2MB.r_cost=2.5 fJ/bit'.")
@click.option("--stage", help="Only this stage.")
@click.option("--step", type=int, help="Only this recorder step.")
@click.option("--rank", type=int, help="Only this rank.")
@click.option("--ignore-module", "ignore_modules", multiple=True, metavar="NAME")
@click.option("--compat", type=click.Choice(["spikingjelly"]), help="Reproduce SpikingJelly 2.0.0's numbers.")
@click.option("--strict", is_flag=True, help="Refuse (exit 2) where SpikingJelly would refuse.")
@recompute_option()
@click.option("--by", "view", help="Breakdown shown by the table: component, stage, module, ... (what the "
              "model reports; default: component, or the model's first), or trace: one row per trace.")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--units", type=click.Choice(UNIT_CHOICES), default="auto", show_default=True,
              help="Energy unit of the table (auto: the largest that keeps values at least 1).")
def energy(trace_paths, model, preset, overrides, stage, step, rank, ignore_modules, compat, strict, recompute, view,
           output_format, units, execution):
    """Energy of TRACE under one preset, by component, stage or module.

    Example: spiketrace energy runs/step --model compute --preset compute-int8-45nm --by stage

    Several TRACEs, or a directory of trace directories, are added up; --by trace shows each
    (csv: each one's rows, with a trace column). --engine dask runs them on a Dask cluster, one
    task per (trace, rank) for compute and neuromc, per trace for lemaire and spikesim (whose
    numbers do not add up over ranks)."""
    options = {"stage": stage, "step": step, "rank": rank, "compat": compat, "ignore_modules": ignore_modules,
               "strict": strict, "recompute": recompute}
    traces = find_traces(trace_paths)
    if len(traces) == 1 and view != "trace" and execution["engine"] == "in-process":
        _one_trace(traces[0], model, preset, overrides, options, view, output_format, units)
    else:
        _many_traces(traces, model, preset, overrides, options, view, output_format, units, execution)


def _one_trace(trace_path, model, preset, overrides, options, view, output_format, units):
    with Analysis(trace_path) as analysis, warnings_to_stderr():
        trace = analysis.trace
        _warn(trace)
        model = analysis.model(model, preset)
        note = recompute_note(recomputed_events(trace), options["recompute"] or recompute_default(model, options["compat"]))
        if note:
            click.echo(note, err=True)
        report = analysis.energy(model, preset, overrides=overrides, **options)
        modules = module_classes(trace)
        classes = dict(zip(modules["scope"], modules["class_name"].map(short_class)))
        facts = {"path": str(trace.path), "complete": bool(trace.complete), **trace.health()}
    scope = energy_models.SCOPES[model].label
    if output_format == "json":
        document = {"model": model, "scope": scope, **report.to_json(), "trace": facts}
        click.echo(json_text(document, indent=2, default=str))
        return
    frame = report.to_frame()
    if output_format == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
        return
    # views with energies; others (area, unsupported ops) are in --format json/csv
    views = energy_views(frame)
    if view is None:
        view = "component" if "component" in views else (views[0] if views else None)
    elif view not in views:
        raise click.UsageError(f"--by {view}: this model reports energies by {', '.join(views) or 'nothing'}")
    chosen = preset or energy_models.DEFAULT_PRESETS[model]
    click.echo(f"{model} energy ({scope}) under {safe_line(chosen)}: {format_energy(total_of(frame), unit=units)}"
               + (f" ({safe_line(', '.join(overrides))})" if overrides else ""))
    if view is not None:
        click.echo("\n".join(energy_text(frame, view, model, classes, unit=units)))
    for key, value, unit in _headline_values(frame):
        click.echo(f"{key}: {value:,.6g} {unit}")
    for warning in getattr(report, "warnings", []) or []:
        click.echo(f"warning: {safe_line(warning)}", err=True)


def _many_traces(traces, model, preset, overrides, options, view, output_format, units, execution):
    """Several traces (or one on a cluster, or --by trace): analyze.many.energy, then the same
    table over the added report rows, or one row per trace."""
    from analyze import many
    from analyze.present import many_traces

    with warnings_to_stderr():
        combined = many.energy(traces, model, preset, overrides=overrides, **options, **execution)
        warn_traces(combined.traces)
        note = recompute_note(sum(f.recomputed_events for f in combined.traces),
                              options["recompute"] or recompute_default(combined.model, options["compat"]))
        if note:
            click.echo(note, err=True)
    scope = energy_models.SCOPES[combined.model].label
    if output_format == "json":
        click.echo(json_text(many_traces.energy_json_many(combined, scope), indent=2, default=str))
        return
    frame = combined.frame
    if output_format == "csv":
        shown = many_traces.energy_by_trace_frame(combined) if view == "trace" else frame
        click.echo(shown.to_csv(index=False), nl=False)
        return
    views = energy_views(frame)
    if view is None:
        view = "component" if "component" in views else (views[0] if views else None)
    elif view not in (*views, "trace"):
        raise click.UsageError(f"--by {view}: this model reports energies by {', '.join([*views, 'trace'])}")
    added = f" ({len(traces)} traces, added up)" if len(traces) > 1 else ""
    click.echo(f"{combined.model} energy ({scope}) under {safe_line(combined.preset)}: "
               f"{format_energy(total_of(frame), unit=units)}"
               + (f" ({safe_line(', '.join(overrides))})" if overrides else "") + added)
    if view == "trace":
        click.echo("\n".join(many_traces.energy_by_trace_lines(combined, unit=units)))
    elif view is not None:
        modules = combined.modules()
        classes = dict(zip(modules["scope"], modules["class_name"].map(short_class)))
        click.echo("\n".join(energy_text(frame, view, combined.model, classes, unit=units)))
    for key, value, unit in _headline_values(frame):
        click.echo(f"{key}: {value:,.6g} {unit}")
    for warning in combined.warnings:
        click.echo(f"warning: {safe_line(warning)}", err=True)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@model_option()
@click.option("--preset", "presets", multiple=True, metavar="NAME|FILE", help="A preset to cost (repeatable).")
@click.option("--base", metavar="NAME|FILE", help="The preset --sweep varies (default: the model's).")
@click.option("--sweep", "sweeps", multiple=True, metavar="KEY=START:STOP:N",
              help="Sweep a parameter over N evenly spaced values (repeatable: the cartesian product).")
@click.option("--stage", help="Only this stage.")
@click.option("--compat", type=click.Choice(["spikingjelly"]))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="results.parquet (or .csv)")
def recost(trace_path, model, presets, base, sweeps, stage, compat, out):
    """Cost TRACE under many presets or a sweep; the trace is mapped once.

    Example: spiketrace recost runs/step --preset compute-fp16-45nm --sweep e_mac_pj=0.1:4.6:50 --out sweep.parquet"""
    sweep = {}
    for text in sweeps:
        key, sep, spec = text.partition("=")
        parts = spec.split(":")
        if not sep or len(parts) != 3:
            raise click.UsageError(f"--sweep {text!r}: expected KEY=START:STOP:N")
        try:
            sweep[key] = [float(v) for v in np.linspace(float(parts[0]), float(parts[1]), int(parts[2]))]
        except ValueError:
            raise click.UsageError(f"--sweep {text!r}: START and STOP must be numbers and N an integer") from None
    with Analysis(trace_path) as analysis:
        frame = analysis.recost(model, list(presets), sweep=sweep or None, base=base, stage=stage, compat=compat,
                                progress=_progress)
    (frame.to_csv(out, index=False) if out.endswith(".csv") else frame.to_parquet(out, index=False))
    n = frame["preset"].nunique()
    click.echo(f"wrote {len(frame)} rows for {n} preset(s) to {out}")


@main.group()
def presets():
    """Hardware presets: list, show, validate, import-zigzag.

    Example: spiketrace presets show neuromc-like-v1 --set mac_cost_pj.wg=0.7"""

@presets.command("list")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def list_command(output_format):
    shipped = list_presets()
    if output_format == "json":
        click.echo(json_text([{"name": p.name, "model": p.model, "description": p.description,
                               "source": p.source} for p in shipped], indent=2))
        return
    frame = pd.DataFrame([(p.name, p.model, p.description) for p in shipped], columns=["name", "model", "description"])
    click.echo(_table(frame))

@presets.command("show")
@click.argument("name", metavar="NAME|FILE")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE")
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def show(name, overrides, output_format):
    preset = load_preset(name, overrides)
    if output_format == "json":
        click.echo(json_text(preset.to_json(), indent=2))
        return
    click.echo(f"{safe_line(preset.name)} ({preset.model}): {safe_line(preset.description)}\n"
               f"source: {safe_line(preset.source)}")
    for key, value in preset.flat().items():
        click.echo(safe_line(f"  {key} = {value} {preset.units.get(key, '')}".rstrip()))

@presets.command("import-zigzag")
@click.argument("hardware", type=click.Path())
@click.option("--base", default="neuromc-like-v1", show_default=True, help="The NeuroMC preset to derive from.")
@click.option("--map", "pairs", multiple=True, metavar="ZIGZAG=INSTANCE",
              help="Put ZigZag memory ZIGZAG in place of NeuroMC instance INSTANCE (default: same names).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The preset TOML to write.")
def import_zigzag(hardware, base, pairs, out):
    """Derive a NeuroMC preset whose memories come from a ZigZag hardware YAML."""
    from pathlib import Path

    from analyze.energy.neuromc.zigzag import preset_from_zigzag, preset_toml

    mapping = {}
    for pair in pairs:
        source, sep, target = pair.partition("=")
        if not sep:
            raise click.UsageError(f"--map {pair!r}: expected ZIGZAG=INSTANCE")
        mapping[source.strip()] = target.strip()
    preset = preset_from_zigzag(hardware, base, mapping or None)
    Path(out).write_text(preset_toml(preset))
    read_preset_file(out)  # what we wrote loads back
    click.echo(safe_line(f"wrote {out}: {preset.name} ({len(preset.overrides)} parameters from {hardware})"))

@presets.command("validate")
@click.argument("path", type=click.Path())
def validate(path):
    """Check a preset file: its keys, units and values for its model."""
    preset = read_preset_file(path)
    click.echo(safe_line(f"{path}: ok ({preset.model} preset {preset.name!r}, {len(preset.flat())} parameters)"))
