"""`spiketrace energy`, `recost` and `presets`: thin commands over spiketrace.analyze.energy.

`energy --format json` prints the report's fields (the model's `Report.to_json()`, SpikingJelly's
field names), with `model`, `scope` and `trace` (path, complete, and Trace.health(): degraded,
compiled, compiled_seen, tracker_underflows); `presets show --format json` prints
`Preset.to_json()`, whose dotted parameter keys are the ones `--set` and `recost --sweep` take.
"""

from __future__ import annotations

import click
import numpy as np
import pandas as pd

from spiketrace.analyze import energy as energy_models
from spiketrace.analyze.cli.app import (
    _table,
    _warn,
    emit_frame,
    emit_text,
    engine_options,
    main,
    model_option,
    output_options,
    recompute_option,
    selected_traces,
    selection_options,
    trace_options,
    warn_traces,
    warnings_to_stderr,
)
from spiketrace.analyze.cli.chip import chip_options
from spiketrace.analyze.cli.model_flags import model_flags
from spiketrace.analyze.cli.paper import paper_options
from spiketrace.analyze.energy import list_presets, load_preset, read_preset_file
from spiketrace.analyze.energy.breakdown import total_of
from spiketrace.analyze.energy.scopes import recompute_default, scope_label, selection_label, trace_phases
from spiketrace.analyze.many.traces import find_traces
from spiketrace.analyze.present.counts import short_class
from spiketrace.analyze.present.energy_table import energy_text, energy_views, ordered_frame, ordered_json
from spiketrace.analyze.present.health import recompute_note
from spiketrace.analyze.present.safe_text import json_text, safe_line
from spiketrace.analyze.present.units import UNIT_CHOICES, format_energy
from spiketrace.analyze.presets.provenance import provenance_line
from spiketrace.analyze.results import Analysis
from spiketrace.analyze.trace.facts import module_classes, recomputed_events


def _headline_values(frame):
    """Non-energy totals a model reports (SpikeSim's area_mm2, latency_ms) as (key, value, unit)."""
    if "value" not in frame.columns:
        return []
    rows = frame[(frame["breakdown"] == "total") & frame["pj"].isna() & frame["value"].notna()]
    return [(k, float(v), u if "unit" in frame.columns else "") for k, v, u in
            zip(rows["key"], rows["value"], rows["unit"] if "unit" in frame.columns else [""] * len(rows))]


def _progress(items):
    """A bar over the presets costed, on a terminal only (tqdm's disable=None)."""
    from spiketrace.analyze.progress import each

    return each(items, "presets", "preset")


@main.command()
@trace_options
@engine_options
@click.argument("trace_paths", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@selection_options
@model_option()
@click.option("--preset", metavar="NAME|FILE", help="Shipped preset name or TOML file (default: the model's).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a preset parameter, e.g. e_mac_pj=3.1 or 'memory.sram_2MB.r_cost=2.5 fJ/bit'.")
@click.option("--ignore-module", "ignore_modules", multiple=True, metavar="NAME",
              help="Skip the work done while a module of this class (qualified or bare name) or path runs; repeatable.")
@click.option("--compat", type=click.Choice(["spikingjelly"]), help="Reproduce SpikingJelly 2.0.0's numbers.")
@click.option("--strict", is_flag=True, help="Refuse (exit 2) where SpikingJelly would refuse.")
@recompute_option()
@click.option("--by", "view", help="Breakdown shown by the table: component, stage, module, ... (what the "
              "model reports; default: component, or the model's first), or trace: one row per trace.")
@output_options("table", "csv", "json", "parquet", "markdown", "latex")
@click.option("--units", type=click.Choice(UNIT_CHOICES), default="auto", show_default=True,
              help="Energy unit of the table (auto: the largest that keeps values at least 1).")
@chip_options
@paper_options
def energy(trace_paths, selection, model, preset, overrides, ignore_modules, compat, strict, recompute, view,
           output_format, out, units, execution):
    """Energy of TRACE under one preset, by component, stage or module.

    Example: spiketrace energy runs/step --model compute --preset compute-int8-45nm --by stage --phase forward

    Filters: --stage, --step, --rank select the work costed, --phase the stages of that phase;
    --module is refused (a model costs whole stages: --by module shows each module's energy).
    csv, json and parquet hold the report's rows (breakdown, key, pj, count, ...).
    --model paper: the per-layer table papers report (--mode, --first-layer, --non-spike,
    --matmul-rate, --samples; markdown and latex too; JSON: docs/paper_energy_json.md).
    --model chip: a neuromorphic chip's events (--preset loihi-2018, truenorth-2014, ...;
    --step-time 1ms charges static power; --host paper-fp32-45nm costs the host work; JSON:
    docs/chip_energy_json.md).

    Several TRACEs, or a directory of trace directories, are added up; --by trace shows each
    (csv: each one's rows, with a trace column). --engine dask runs them on a Dask cluster, one
    task per (trace, rank) for compute and neuromc, per trace for lemaire and spikesim (whose
    numbers do not add up over ranks) and for --format json of one trace (its report's document
    is the whole trace's); the output is the in-process engine's."""
    options = {"compat": compat, "ignore_modules": ignore_modules, "strict": strict, "recompute": recompute}
    traces = find_traces(trace_paths)
    output = (output_format, out, units)
    if len(traces) == 1 and view != "trace":  # the output's shape follows what was asked, not the engine
        _one_trace(traces[0], model, preset, overrides, selection, options, view, output, execution)
    else:
        _many_traces(traces, model, preset, overrides, selection, options, view, output, execution)


def _one_trace(trace_path, model, preset, overrides, selection, options, view, output, execution):
    output_format, out, units = output
    if execution["engine"] != "in-process":
        model, report, classes, facts, scope = _one_trace_on_engine(trace_path, model, preset, overrides, selection,
                                                                    options, output_format, execution)
    else:
        with Analysis(trace_path) as analysis, warnings_to_stderr():
            trace = analysis.trace
            _warn(trace)
            selection.check(trace)
            options = {**selection.energy_options(trace), **options}
            model = analysis.model(model, preset)
            note = recompute_note(recomputed_events(trace),
                                  options["recompute"] or recompute_default(model, options["compat"]))
            if note:
                click.echo(note, err=True)
            report = analysis.energy(model, preset, overrides=overrides, **options)
            modules = module_classes(trace)
            classes = dict(zip(modules["scope"], modules["class_name"].map(short_class)))
            facts = {"path": str(trace.path), "complete": bool(trace.complete), **trace.health()}
            scope = selection_label(trace, model, selection)
    if output_format == "json":
        document = {"model": model, "scope": scope, **ordered_json(report.to_json()), "trace": facts}
        if selection:
            document["selection"] = selection.as_dict()
        emit_text(json_text(document, indent=2, default=str), out)
        return
    frame = ordered_frame(report.to_frame())
    if output_format in ("csv", "parquet"):
        emit_frame(frame, output_format, out)
        return
    # views with energies; others (area, unsupported ops) are in --format json/csv
    views = energy_views(frame)
    if view is None:
        view = "component" if "component" in views else (views[0] if views else None)
    elif view not in views:
        raise click.UsageError(f"--by {view}: this model reports energies by {', '.join(views) or 'nothing'}")
    chosen = preset or energy_models.DEFAULT_PRESETS[model]
    lines = [f"{model} energy ({scope}) under {safe_line(chosen)}: {format_energy(total_of(frame), unit=units)}"
             + (f" ({safe_line(', '.join(overrides))})" if overrides else "")
             + (f"; {safe_line(selection.describe())}" if selection else "")]
    if view is not None:
        lines += energy_text(frame, view, model, classes, unit=units)
    lines += [f"{key}: {value:,.6g} {unit}" for key, value, unit in _headline_values(frame)]
    emit_text("\n".join(lines), out)
    for warning in getattr(report, "warnings", []) or []:
        click.echo(f"warning: {safe_line(warning)}", err=True)


def _one_trace_on_engine(trace_path, model, preset, overrides, selection, options, output_format, execution):
    """What _one_trace shows of a trace the engine `execution` names evaluates: its model, its
    report (spiketrace.analyze.many.EnergyPart: the same rows and, for json, the same document),
    module classes, facts and scope label."""
    combined = _evaluated([trace_path], model, preset, overrides, selection, options, execution,
                          documents=output_format == "json")
    modules = combined.modules()
    facts = combined.traces[0]
    return (combined.model, combined.report(), dict(zip(modules["scope"], modules["class_name"].map(short_class))),
            {"path": facts.document["path"], "complete": facts.document["complete"], **facts.health},
            _many_label([trace_path], combined.model, selection))


def _evaluated(traces, model, preset, overrides, selection, options, execution, documents=False):
    """spiketrace.analyze.many.energy of the traces on the engine `execution` names, their
    health, warnings and recompute note said on stderr."""
    from spiketrace.analyze import many

    options = {**selected_traces(selection, traces, execution, energy=True), **options}
    with warnings_to_stderr():
        combined = many.energy(traces, model, preset, overrides=overrides, **options, **execution, progress=True,
                               documents=documents)
        warn_traces(combined.traces)
        note = recompute_note(sum(f.recomputed_events for f in combined.traces),
                              options["recompute"] or recompute_default(combined.model, options["compat"]))
        if note:
            click.echo(note, err=True)
    return combined


def _many_traces(traces, model, preset, overrides, selection, options, view, output, execution):
    """Several traces (or one, --by trace): spiketrace.analyze.many.energy, then the same table over
    the added report rows, or one row per trace."""
    from spiketrace.analyze.present import many_traces

    output_format, out, units = output
    combined = _evaluated(traces, model, preset, overrides, selection, options, execution)
    scope = _many_label(traces, combined.model, selection)
    if output_format == "json":
        emit_text(json_text(many_traces.energy_json_many(combined, scope, selection.as_dict()), indent=2, default=str),
                  out)
        return
    frame = ordered_frame(combined.frame)
    if output_format in ("csv", "parquet"):
        emit_frame(many_traces.energy_by_trace_frame(combined) if view == "trace" else frame, output_format, out)
        return
    views = energy_views(frame)
    if view is None:
        view = "component" if "component" in views else (views[0] if views else None)
    elif view not in (*views, "trace"):
        raise click.UsageError(f"--by {view}: this model reports energies by {', '.join([*views, 'trace'])}")
    added = f" ({len(traces)} traces, added up)" if len(traces) > 1 else ""
    lines = [f"{combined.model} energy ({scope}) under {safe_line(combined.preset)}: "
             f"{format_energy(total_of(frame), unit=units)}"
             + (f" ({safe_line(', '.join(overrides))})" if overrides else "") + added
             + (f"; {safe_line(selection.describe())}" if selection else "")]
    if view == "trace":
        lines += many_traces.energy_by_trace_lines(combined, unit=units)
    elif view is not None:
        modules = combined.modules()
        classes = dict(zip(modules["scope"], modules["class_name"].map(short_class)))
        lines += energy_text(frame, view, combined.model, classes, unit=units)
    lines += [f"{key}: {value:,.6g} {unit}" for key, value, unit in _headline_values(frame)]
    emit_text("\n".join(lines), out)
    for warning in combined.warnings:
        click.echo(f"warning: {safe_line(warning)}", err=True)


def _many_label(traces, model, selection) -> str:
    """The scope label of what the traces' selections hold together (each trace read for its phases)."""
    from spiketrace.analyze.trace import open_trace

    phases = set()
    for path in traces:
        with open_trace(path) as trace:
            if selection:
                with selection.views(trace):
                    phases |= set(trace_phases(trace))
            else:
                phases |= set(trace_phases(trace))
    return scope_label(model, phases)


class SweepRange(click.ParamType):
    """KEY=START:STOP:N: the preset parameter KEY over N evenly spaced values from START to STOP."""

    name = "KEY=START:STOP:N"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        key, sep, spec = str(value).partition("=")
        parts = spec.split(":")
        if not sep or not key.strip() or len(parts) != 3:
            self.fail(f"{value!r}: expected KEY=START:STOP:N, e.g. e_mac_pj=0.1:4.6:50", param, ctx)
        try:
            start, stop, n = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            self.fail(f"{value!r}: START and STOP must be numbers and N a whole number", param, ctx)
        if n < 1:
            self.fail(f"{value!r}: N must be at least 1", param, ctx)
        return key.strip(), [float(v) for v in np.linspace(start, stop, n)]


@main.command()
@trace_options
@engine_options
@click.argument("trace_paths", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@selection_options
@model_option()
@click.option("--preset", "presets", multiple=True, metavar="NAME|FILE", help="A preset to cost (repeatable).")
@click.option("--base", metavar="NAME|FILE", help="The preset --sweep varies (default: the one --preset names, "
              "else the model's).")
@click.option("--sweep", "sweeps", multiple=True, type=SweepRange(),
              help="Sweep a parameter over N evenly spaced values (repeatable: the cartesian product).")
@click.option("--compat", type=click.Choice(["spikingjelly"]), help="Reproduce SpikingJelly 2.0.0's numbers.")
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The result table: FILE.parquet, or FILE.csv (one row per preset and breakdown entry).")
@model_flags
def recost(trace_paths, selection, model, presets, base, sweeps, compat, out, execution, model_options):
    """Cost TRACE under many presets or a sweep; the trace is mapped once.

    Filters as for energy: --stage, --step, --rank select the work costed, --phase its stages.

    Several TRACEs, or a directory of trace directories: each is mapped once and costed under
    every preset, the rows added per preset. --engine dask runs them on a Dask cluster, one task
    per (trace, rank), or (trace, rank, step range) for a large rank, for compute and neuromc.

    --model paper and --model chip take their own options as energy does (--mode, --first-layer,
    --non-spike, --matmul-rate, --samples, --time-steps; --step-time, --host).

    Example: spiketrace recost runs/step --preset compute-fp16-45nm --sweep e_mac_pj=0.1:4.6:50 --out sweep.parquet"""
    sweep = dict(sweeps)
    traces = find_traces(trace_paths)
    if len(traces) == 1 and execution["engine"] == "in-process":
        with Analysis(traces[0]) as analysis:
            selection.check(analysis.trace)
            frame = analysis.recost(model, list(presets), sweep=sweep or None, base=base, compat=compat,
                                    progress=_progress, **selection.energy_options(analysis.trace), **model_options)
    else:
        from spiketrace.analyze import many

        options = selected_traces(selection, traces, execution, energy=True)
        with warnings_to_stderr():
            combined = many.recost(traces, model, list(presets), sweep=sweep or None, base=base, compat=compat,
                                   **options, **model_options, **execution, progress=True)
            warn_traces(combined.traces)
        frame = combined.frame
    (frame.to_csv(out, index=False) if out.endswith(".csv") else frame.to_parquet(out, index=False))
    n = frame["preset"].nunique()
    click.echo(f"wrote {len(frame)} rows for {n} preset(s) to {out}")


@main.group()
def presets():
    """Hardware presets: list, show, validate, import-zigzag.

    Example: spiketrace presets show neuromc-like-v1 --set mac_cost_pj.wg=0.7"""

@presets.command("list")
@output_options("table", "json")
def list_command(output_format, out):
    """List the shipped presets: name, model, description (json: and source).

    Example: spiketrace presets list --format json"""
    shipped = list_presets()
    if output_format == "json":
        emit_text(json_text([{"name": p.name, "model": p.model, "description": p.description,
                              "source": p.source, "provenance": dict(p.provenance)} for p in shipped], indent=2), out)
        return
    frame = pd.DataFrame([(p.name, p.model, p.description) for p in shipped], columns=["name", "model", "description"])
    emit_text(_table(frame), out)

@presets.command("show")
@click.argument("name", metavar="NAME|FILE")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a parameter first, e.g. e_mac_pj=3.1 or 'e_ac_pj=400 fJ' (repeatable).")
@output_options("table", "json")
def show(name, overrides, output_format, out):
    """Show a preset's parameters with their units (json: the keys --set and recost --sweep take).

    Example: spiketrace presets show neuromc-like-v1 --set mac_cost_pj.wg=0.7"""
    preset = load_preset(name, overrides)
    if output_format == "json":
        emit_text(json_text(preset.to_json(), indent=2), out)
        return
    lines = [f"{safe_line(preset.name)} ({preset.model}): {safe_line(preset.description)}",
             f"source: {safe_line(preset.source)}"]
    if preset.provenance:
        lines.append(f"provenance: {safe_line(provenance_line(preset.provenance))}")
    lines += [safe_line(f"  {key} = {value} {preset.units.get(key, '')}".rstrip()) for key, value in preset.flat().items()]
    emit_text("\n".join(lines), out)

@presets.command("import-zigzag")
@click.argument("hardware", type=click.Path())
@click.option("--base", default="neuromc-like-v1", show_default=True, help="The NeuroMC preset to derive from.")
@click.option("--map", "pairs", multiple=True, metavar="ZIGZAG=INSTANCE",
              help="Put ZigZag memory ZIGZAG in place of NeuroMC instance INSTANCE (default: same names).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The preset TOML to write.")
def import_zigzag(hardware, base, pairs, out):
    """Derive a NeuroMC preset whose memories come from a ZigZag hardware YAML.

    Example: spiketrace presets import-zigzag hw.yaml --map sram_1MB=sram --out my-chip.toml"""
    from pathlib import Path

    from spiketrace.analyze.energy.neuromc.zigzag import preset_from_zigzag, preset_toml

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
    """Check a preset file: its keys, units and values for its model.

    Example: spiketrace presets validate my-chip.toml"""
    preset = read_preset_file(path)
    click.echo(safe_line(f"{path}: ok ({preset.model} preset {preset.name!r}, {len(preset.flat())} parameters)"))
