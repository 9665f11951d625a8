"""`spiketrace counts`: the op counters per module scope, op, stage or module class.

`counts --format json` prints the document of spiketrace.analyze.present.counts (docs/counts_json.md);
counts exits 1 when --strict or --min-coverage is not met.
"""

from __future__ import annotations

import warnings

import click

from spiketrace.analyze.cli.app import (
    _fail,
    _warn,
    emit_frame,
    emit_text,
    engine_options,
    main,
    one_line,
    output_options,
    recompute_option,
    selected_traces,
    selection_options,
    trace_options,
    warn_traces,
    warnings_to_stderr,
)
from spiketrace.analyze.counters import count, load_rules, neurobench
from spiketrace.analyze.counters.user_rules import RuleError
from spiketrace.analyze.many.traces import find_traces
from spiketrace.analyze.present import counts as counts_view
from spiketrace.analyze.present.health import recompute_note
from spiketrace.analyze.present.safe_text import json_text
from spiketrace.analyze.trace import open_trace
from spiketrace.analyze.trace.facts import module_classes, recomputed_events


class Fraction(click.ParamType):
    """A fraction in 0..1, or a percentage such as 95%."""

    name = "fraction"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            self.fail(f"{value!r} is not a fraction (0..1) or a percentage (95%)", param, ctx)
        if not 0 <= number <= 1:
            self.fail(f"{value!r} is outside 0..1 (write 95% for a percentage)", param, ctx)
        return number


@main.command()
@trace_options
@engine_options
@click.argument("trace_paths", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@click.option("--counter", "counter_names", multiple=True, metavar="NAMES",
              help="Counters to run, comma separated or repeated (default: all of spiketrace.analyze.counters.COUNTERS).")
@click.option("--by", "view", type=click.Choice([*counts_view.VIEWS, "trace"]), default="scope", show_default=True,
              help="Table: module tree, top ops, stages, module classes, or one row per trace.")
@click.option("--depth", type=click.IntRange(min=0), help="--by scope: deepest level shown (Global is 0).")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True,
              help="Ops shown per counter (--by op, and uncovered ops in the coverage block).")
@selection_options
@click.option("--ops", multiple=True, metavar="GLOB",
              help="Only ops matching GLOB (a bare name matches as a prefix); repeatable.")
@click.option("--ignore-module", "ignore_modules", multiple=True, metavar="NAME",
              help="Skip events while a module of this class (qualified or bare name) or path runs; repeatable.")
@click.option("--compat", type=click.Choice(["spikingjelly"]), help="Count exactly as SpikingJelly 2.0.0 does.")
@click.option("--convention", type=click.Choice(["neurobench"]),
              help="synop and mac as NeuroBench's SynapticOperations (Effective_ACs, Effective_MACs; per sample too).")
@click.option("--samples", type=click.IntRange(min=1), metavar="N",
              help="--convention neurobench: the samples to divide by (default: each step's batch dimension, "
                   "summed: dim 0 of the model's first input as NeuroBench counts batch-first data, dim 1 of a "
                   "SpikingJelly multi-step module's [T, B, ...] input).")
@recompute_option()
@click.option("--rules", "rule_files", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Your own rules: a TOML file of [counter] tables of \"op\" = \"SQL rule\" (repeatable).")
@click.option("--strict", is_flag=True, help="Exit 1 when some counter has no rule for an op of the selection.")
@click.option("--min-coverage", type=Fraction(), metavar="P",
              help="Exit 1 when a counter covers less than P of the calls (0..1 or a percentage like 95%).")
@output_options("table", "csv", "json", "parquet")
def counts(trace_paths, counter_names, view, depth, top, selection, ops, ignore_modules,
           compat, convention, samples, recompute, rule_files, strict, min_coverage, output_format, out,
           execution) -> None:
    """Count operations (FLOPs, MACs, ACs, ...) of TRACE by module, op or stage.

    Example: spiketrace counts runs/step --by op --counter flop,mac --strict --phase backward

    csv and parquet write the tidy frame (counter, scope, op, [stage,] value).

    Several TRACEs, or a directory of trace directories, are added up; --by trace shows each
    (csv and parquet: each one's rows, with a trace column). --engine dask runs them on a Dask
    cluster, one task per (trace, rank, step range): spiketrace counts runs/ --by trace --engine dask --workers 4

    Exit codes: 0 success; 1 --strict or --min-coverage not met (after printing the report);
    2 bad arguments (an unknown counter) or the trace could not be read."""
    for path in rule_files:
        try:
            load_rules(path)
        except RuleError as problem:
            _fail(str(problem), 2)
    if samples and not convention:
        _fail("--samples is for --convention neurobench", 2)
    names = [n.strip() for item in counter_names for n in item.split(",") if n.strip()] or None
    options = {**selection.counts_options(), "ops": list(ops) or None, "ignore_modules": list(ignore_modules),
               "compat": compat, "recompute": recompute, **({"convention": convention} if convention else {})}
    traces = find_traces(trace_paths)
    if len(traces) == 1 and view != "trace":  # the output's shape follows what was asked, not the engine
        result, fractions = _one_trace(traces[0], names, selection, options, view, depth, top, output_format, out,
                                       execution, samples)
    else:
        result, fractions = _many_traces(traces, names, selection, options, view, depth, top, output_format, out,
                                         execution)
    failure = (counts_view.strict_problem(result) if strict else None) or (
        counts_view.coverage_problem(fractions, min_coverage) if min_coverage is not None else None)
    if failure:
        _fail(failure, 1)


def _one_trace(trace_path, names, selection, options, view, depth, top, output_format, out, execution, samples=None):
    if execution["engine"] != "in-process":
        result, document, modules = _one_trace_on_engine(trace_path, names, selection, options, view, execution)
    else:
        with open_trace(trace_path) as trace:
            _warn(trace)
            selection.check(trace)
            note = recompute_note(recomputed_events(trace), options["recompute"] or "include")
            if note:
                click.echo(note, err=True)
            # the NeuroBench convention warns where its samples are ambiguous; --samples settles them
            with warnings.catch_warnings() if samples else warnings_to_stderr():
                if samples:
                    warnings.simplefilter("ignore")
                try:
                    result = count(trace, names, by=("stage",) if view == "stage" else (), **options, progress=True)
                except ValueError as exc:
                    _fail(one_line(exc), 2)
            document = counts_view.counts_json(result, trace, counters=names or counts_view.counter_names(result),
                                               selection=selection.as_dict())
            modules = module_classes(trace)
    names = names or counts_view.counter_names(result)
    if result.frame.empty and result.unsupported.empty:
        click.echo("warning: no events match the selection", err=True)
    fractions = {name: entry["coverage"] for name, entry in document["counters"].items()}
    per_sample = neurobench.summary(result, samples) if options.get("convention") else None
    if per_sample:
        document["neurobench"] = per_sample[0]
    if output_format in ("csv", "parquet"):
        _write_frame(counts_view.tidy_frame(result, names), output_format, out)
    else:
        if output_format == "json":
            text = json_text(document, indent=1)
        else:
            text = counts_view.table_text(result, view, depth, top, modules=modules, coverage=fractions, counters=names)
            text += f"\n\n{per_sample[1]}" if per_sample else ""
        _write_text(text, out)
    return result, fractions


def _one_trace_on_engine(trace_path, names, selection, options, view, execution):
    """What _one_trace shows of a trace the engine `execution` names counts: the counts, the
    one-trace document (spiketrace.analyze.present.many_traces.counts_json_many of one trace:
    the same as counts_json) and the module classes."""
    from spiketrace.analyze.present import many_traces

    combined = _counted([trace_path], names, selection, options, view, execution)
    result = combined.total
    document = many_traces.counts_json_many(combined, names or counts_view.counter_names(result),
                                            selection=selection.as_dict())
    return result, document, combined.modules()


def _counted(traces, names, selection, options, view, execution):
    """spiketrace.analyze.many.count of the traces on the engine `execution` names, their health,
    warnings and recompute note said on stderr."""
    from spiketrace.analyze import many

    selected_traces(selection, traces, execution)
    try:
        combined = many.count(traces, names, by=("stage",) if view == "stage" else (), **options, **execution,
                              progress=True)
    except ValueError as exc:
        _fail(one_line(exc), 2)
    warn_traces(combined.traces)
    note = recompute_note(sum(f.recomputed_events for f in combined.traces), options["recompute"] or "include")
    if note:
        click.echo(note, err=True)
    return combined


def _many_traces(traces, names, selection, options, view, depth, top, output_format, out, execution):
    """Several traces (or one, --by trace): spiketrace.analyze.many.count, then the same tables over
    the added counts, or one row per trace."""
    from spiketrace.analyze.present import many_traces

    combined = _counted(traces, names, selection, options, view, execution)
    result = combined.total
    names = names or counts_view.counter_names(result)
    if result.frame.empty and result.unsupported.empty:
        click.echo("warning: no events match the selection", err=True)
    fractions = {name: result.coverage(name) for name in names}
    if output_format in ("csv", "parquet"):
        frame = (many_traces.counts_by_trace_frame(combined, names) if view == "trace"
                 else counts_view.tidy_frame(result, names))
        _write_frame(frame, output_format, out)
        return result, fractions
    if output_format == "json":
        text = json_text(many_traces.counts_json_many(combined, names, selection=selection.as_dict()), indent=1)
    elif view == "trace":
        text = many_traces.counts_by_trace_text(combined, names, fractions, top)
    else:
        text = counts_view.table_text(result, view, depth, top, modules=combined.modules(), coverage=fractions,
                                      counters=names)
        if len(traces) > 1:
            text = f"{len(traces)} traces, added up (--by trace shows each)\n\n" + text
    _write_text(text, out)
    return result, fractions


def _write_frame(frame, output_format, out) -> None:
    emit_frame(frame, output_format, out)


def _write_text(text, out) -> None:
    emit_text(text, out)
