"""`spiketrace energy TRACE --model chip --preset NAME`: what a neuromorphic chip costs per event
(spiketrace.analyze.energy.chip) as a table, csv, parquet or the JSON document of
docs/chip_energy_json.md, each naming the preset's source, grade and scope.

`chip_options` adds --step-time and --host to the energy command and sends a chip run here
(with --samples and --time-steps, shared with --model paper); any other model refuses them."""

from __future__ import annotations

import functools

import click

from spiketrace.analyze.cli.app import _warn, emit_frame, emit_text, warnings_to_stderr, with_flags
from spiketrace.analyze.present.safe_text import json_text, safe_line

_PAPER_ONLY = ("mode", "first_layer", "non_spike", "matmul_rate")


# The chip model's own options, as the energy command (chip_options) and recost (model_flags.py) take them.
CHIP_FLAGS = (
    click.option("--step-time", metavar="TIME",
                 help="--model chip: the chip's time per step (1ms, 250us, or seconds): charges static power and "
                      "time-based figures (default: none, and the output says static energy was not included)."),
    click.option("--host", metavar="PRESET",
                 help="--model chip: the preset (its e_mac_pj: paper-fp32-45nm, ...) that costs the work a chip "
                      "cannot do as events (default: listed, uncosted)."),
)


chip_flags = with_flags(CHIP_FLAGS)


def chip_options(command):
    """--step-time and --host on the energy command (outside paper_options, so a chip run
    also takes --samples and --time-steps)."""

    @chip_flags
    @functools.wraps(command)
    def with_chip_options(*args, step_time, host, **kwargs):
        if _is_chip(kwargs["model"], kwargs["preset"]):
            paper_only = [name for name in _PAPER_ONLY if kwargs.get(name) is not None]
            if paper_only:
                raise click.UsageError(f"{', '.join('--' + n.replace('_', '-') for n in paper_only)}: options of "
                                       "--model paper (the chip model counts synaptic events exactly)")
            if kwargs["output_format"] in ("markdown", "latex"):
                raise click.UsageError(f"--format {kwargs['output_format']} is written by --model paper only")
            options = {"step_time": step_time, "host": host, "samples": kwargs.pop("samples"),
                       "time_steps": kwargs.pop("time_steps")}
            for name in _PAPER_ONLY:
                kwargs.pop(name)
            return chip_energy(options=options, **kwargs)
        given = [flag for flag, value in (("--step-time", step_time), ("--host", host)) if value is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: options of --model chip")
        return command(*args, **kwargs)

    return with_chip_options


def _is_chip(model, preset) -> bool:
    if model is not None or preset is None:
        return model == "chip"
    from spiketrace.analyze.energy import load_preset

    return load_preset(preset).model == "chip"


def chip_energy(trace_paths, selection, model, preset, overrides, ignore_modules, compat, strict, recompute, view,
                output_format, out, units, execution, options):
    """The chip table of one trace."""
    from spiketrace.analyze.energy import DEFAULT_PRESETS, load_preset, selection_label
    from spiketrace.analyze.energy.chip import parse_step_time
    from spiketrace.analyze.many.traces import find_traces
    from spiketrace.analyze.present import chip_table
    from spiketrace.analyze.results import Analysis

    traces = find_traces(trace_paths)
    if len(traces) != 1:
        raise click.UsageError(f"--model chip costs one trace ({len(traces)} given)")
    if execution["engine"] != "in-process":
        raise click.UsageError("--model chip runs in process (--engine dask is for the other models)")
    if compat is not None or view is not None:
        raise click.UsageError(f"{'--compat' if compat else '--by'}: not an option of --model chip")
    try:
        parse_step_time(options["step_time"])
    except ValueError as problem:
        raise click.BadParameter(str(problem), param_hint="--step-time") from None
    chosen = load_preset(preset or DEFAULT_PRESETS["chip"], overrides)
    if chosen.model != "chip":
        raise click.UsageError(f"--preset {chosen.name}: a {chosen.model} preset, not one of the chip model")
    described = {"name": chosen.name, "source": chosen.source, "provenance": dict(chosen.provenance),
                 "overrides": dict(chosen.overrides)}
    with Analysis(traces[0]) as analysis, warnings_to_stderr():
        trace = analysis.trace
        _warn(trace)
        selection.check(trace)
        settings = {**selection.energy_options(trace), "ignore_modules": ignore_modules, "recompute": recompute}
        try:
            report = analysis.energy("chip", chosen, **settings, **options)
        except ValueError as problem:
            raise click.UsageError(str(problem)) from None
        scope = selection_label(trace, "chip", selection)
        facts = {"path": str(trace.path), "complete": bool(trace.complete), **trace.health()}
    for note in report.warnings:
        click.echo(f"note: {safe_line(note)}", err=True)
    if output_format == "json":
        extra = {"scope": scope, "trace": facts, **({"selection": selection.as_dict()} if selection else {})}
        emit_text(json_text(chip_table.json_document(report, described, extra), indent=2, default=str), out)
    elif output_format in ("csv", "parquet"):
        emit_frame(chip_table.csv_frame(report, described), output_format, out)
    else:
        emit_text(chip_table.text_table(report, described, scope), out)
