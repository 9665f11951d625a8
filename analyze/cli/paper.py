"""`spiketrace energy TRACE --model paper`: the paper convention's per-layer, per-sample table
(spiketrace.analyze.energy.paper) in the format a paper takes: table, markdown, latex
(booktabs), csv, parquet, or the JSON document of docs/paper_energy_json.md.

`paper_options` adds the convention's options to the energy command and sends a paper run
here; the other models never see them (naming one without --model paper is refused)."""

from __future__ import annotations

import functools

import click

from spiketrace.analyze.cli.app import _warn, emit_frame, emit_text, warnings_to_stderr, with_flags
from spiketrace.analyze.present.safe_text import json_text, safe_line

PAPER_FORMATS = ("markdown", "latex")  # the energy command's formats only the paper model writes


# The paper model's options, as the energy command (paper_options) and recost (model_flags.py) take them.
PAPER_FLAGS = (
    click.option("--mode", type=click.Choice(["rate", "event"]), default=None,
                 help="--model paper: rate (default; SOPs = input firing rate x dense MACs, Spikformer Eq. 21) or "
                      "event (the exact nonzero products, NeuroBench's Effective_ACs x samples)."),
    click.option("--first-layer", type=click.Choice(["per-step", "once"]), default=None,
                 help="--model paper: the first layer's MACs per time step (default) or once (divided by the time "
                      "steps)."),
    click.option("--non-spike", type=click.Choice(["mac", "omit"]), default=None,
                 help="--model paper: a later layer's non-spike input (residual sum, BN output, graded spike) "
                      "charged as MACs (default) or left out."),
    click.option("--matmul-rate", type=click.Choice(["left", "right", "both"]), default=None,
                 help="--model paper: the operand whose rate sets a spike x spike matmul's SOPs (default left; both: "
                      "the product of the two rates)."),
    click.option("--samples", type=click.IntRange(min=1), metavar="N",
                 help="--model paper: samples to divide by (default: NeuroBench's rule, each batch's batch "
                      "dimension, summed)."),
    click.option("--time-steps", type=click.IntRange(min=1), metavar="T",
                 help="--model paper --first-layer once: the time steps the first layer's MACs are divided by "
                      "(default: its calls per batch)."),
)


paper_flags = with_flags(PAPER_FLAGS)


def paper_options(command):
    """--mode, --first-layer, --non-spike, --matmul-rate, --samples and --time-steps on the
    energy command: a run of the paper model (--model paper, or a paper preset) goes to
    paper_energy; any other model refuses them, and refuses --format markdown|latex."""

    @paper_flags
    @functools.wraps(command)
    def with_paper_options(*args, mode, first_layer, non_spike, matmul_rate, samples, time_steps, **kwargs):
        given = {name: value for name, value in (("mode", mode), ("first_layer", first_layer),
                                                 ("non_spike", non_spike), ("matmul_rate", matmul_rate),
                                                 ("samples", samples), ("time_steps", time_steps)) if value is not None}
        if _is_paper(kwargs["model"], kwargs["preset"]):
            return paper_energy(options=given, **kwargs)
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise click.UsageError(f"{flags}: options of --model paper")
        if kwargs["output_format"] in PAPER_FORMATS:
            raise click.UsageError(f"--format {kwargs['output_format']} is written by --model paper only")
        return command(*args, **kwargs)

    return with_paper_options


def _is_paper(model, preset) -> bool:
    if model is not None or preset is None:
        return model == "paper"
    from spiketrace.analyze.energy import load_preset

    return load_preset(preset).model == "paper"


def paper_energy(trace_paths, selection, model, preset, overrides, ignore_modules, compat, strict, recompute, view,
                 output_format, out, units, execution, options):
    """The paper table of one trace (a test set is one trace of many batches)."""
    from spiketrace.analyze.energy import DEFAULT_PRESETS, load_preset, selection_label
    from spiketrace.analyze.many.traces import find_traces
    from spiketrace.analyze.present import paper_table
    from spiketrace.analyze.results import Analysis

    traces = find_traces(trace_paths)
    if len(traces) != 1:
        raise click.UsageError(f"--model paper costs one trace ({len(traces)} given): record a test set as one trace, "
                               "one recorder step per batch")
    if execution["engine"] != "in-process":
        raise click.UsageError("--model paper runs in process (--engine dask is for the other models)")
    if compat is not None or view is not None:
        raise click.UsageError(f"{'--compat' if compat else '--by'}: not an option of --model paper (its table is by layer)")
    chosen = load_preset(preset or DEFAULT_PRESETS["paper"], overrides)
    if chosen.model != "paper":
        raise click.UsageError(f"--preset {chosen.name}: a {chosen.model} preset, not one of the paper model")
    described = {"name": chosen.name, "source": chosen.source, "overrides": dict(chosen.overrides)}
    with Analysis(traces[0]) as analysis, warnings_to_stderr():
        trace = analysis.trace
        _warn(trace)
        selection.check(trace)
        settings = {**selection.energy_options(trace), "ignore_modules": ignore_modules, "recompute": recompute}
        report = analysis.energy("paper", chosen, **settings, **options)
        scope = selection_label(trace, "paper", selection)
        facts = {"path": str(trace.path), "complete": bool(trace.complete), **trace.health()}
    for note in report.warnings:
        click.echo(f"note: {safe_line(note)}", err=True)
    if output_format == "json":
        extra = {"scope": scope, "trace": facts, **({"selection": selection.as_dict()} if selection else {})}
        emit_text(json_text(paper_table.json_document(report, described, extra), indent=2, default=str), out)
    elif output_format in ("csv", "parquet"):
        emit_frame(paper_table.csv_frame(report, described), output_format, out)
    elif output_format == "markdown":
        emit_text(paper_table.markdown(report, described, units), out)
    elif output_format == "latex":
        emit_text(paper_table.latex(report, described, units), out)
    else:
        emit_text(paper_table.text_table(report, described, units, scope), out)
