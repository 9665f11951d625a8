"""`spiketrace neurobench`: NeuroBench 2.3.0's static and workload metrics of TRACE, as its
Benchmark.run() dictionary (spiketrace.analyze.counters.neurobench_metrics). --format json
prints that dictionary with NeuroBench's keys; what a metric assumed or lacked goes to stderr.
--stage, --phase, --step and --rank select the batches the workload metrics read, as they select
the work `counts` counts; --module is refused (NeuroBench's metrics are the whole model's)."""

from __future__ import annotations

import warnings

import click

from spiketrace.analyze.cli.app import (
    _fail,
    _warn,
    emit_text,
    main,
    one_line,
    output_options,
    selection_options,
    trace_options,
)


@main.command("neurobench")
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@selection_options
@click.option("--samples", type=click.IntRange(min=1), metavar="N",
              help="Samples the per-sample metrics divide by (default: each batch's batch dimension, summed: dim 0 "
                   "of the model's first input as NeuroBench counts batch-first data, dim 1 of a SpikingJelly "
                   "multi-step module's [T, B, ...] input).")
@click.option("--activation-module", "activation_modules", multiple=True, metavar="CLASS",
              help="A class NeuroBench was given with add_activation_module (qualified or bare name); repeatable.")
@click.option("--wrapper", type=click.Choice(["SNNTorchModel", "TorchModel"]), default="SNNTorchModel",
              show_default=True, help="The NeuroBench model class: SNNTorchModel takes snnTorch neurons as "
                                      "activation layers, TorchModel does not.")
@output_options("table", "json")
def neurobench_command(trace_path, selection, samples, activation_modules, wrapper, output_format, out) -> None:
    """NeuroBench's metrics of TRACE: Footprint, ConnectionSparsity, ParameterCount, SynapticOperations, ...

    Example: spiketrace neurobench runs/nb --activation-module BaseNode --step 0 --format json

    Each recorder step is one batch; bind the Recorder to the model before its first batch."""
    from spiketrace.analyze.counters import neurobench_metrics
    from spiketrace.analyze.present.safe_text import json_text, safe_line
    from spiketrace.analyze.trace import open_trace

    if selection.module is not None:
        _fail(f"--module {selection.module}: NeuroBench's metrics are the whole model's; select batches by "
              "--stage, --phase, --step or --rank, or count a module's operations with `spiketrace counts --module`", 2)
    with open_trace(trace_path) as trace, warnings.catch_warnings():
        _warn(trace)
        selection.check(trace)
        warnings.simplefilter("ignore")  # the samples warning is among the notes, printed below
        try:
            results = neurobench_metrics(trace, samples=samples, activation_modules=list(activation_modules),
                                         wrapper=wrapper, **selection.counts_options())
        except ValueError as exc:
            _fail(one_line(exc), 2)
    for note in results.notes:
        click.echo(f"{'warning' if note.startswith('samples:') else 'note'}: {safe_line(note)}", err=True)
    if output_format == "json":
        emit_text(json_text(dict(results), indent=1), out)
        return
    lines = [f"{key}: {value!r}" for key, value in results.items()]
    lines.append(f"samples: {results.samples}" + (" (given)" if samples else ""))
    if selection:
        lines.append(f"selection: {selection.describe()}")
    if results.activation_layers:
        lines.append(f"activation layers: {', '.join(results.activation_layers)}")
    emit_text("\n".join(safe_line(line) for line in lines), out)
