"""The `spiketrace` command group and what every command shares: one-line errors with exit
code 2 (`--debug` shows the traceback), and the small text helpers.

Exit codes: 0 success; 1 a check or gate failed (`validate`; `validate --strict` also on a
degraded or incomplete capture; `counts --strict`/`--min-coverage`, `diff --fail-if`); 2 the
input could not be used (a bad trace, preset, query, option or filter: one line `error: ...`
on stderr).

Every command that reads a trace takes the same filters (`selection_options`: --stage --phase
--step --rank --module; analyze/present/selection.py says how each analysis applies them) and
the same --format choices (`output_options`): table, csv, json and parquet where the output is
one table (counts, energy, sql, collectives, diff), table and json where it is a document of
several (info, validate, demo, presets list|show); report and plot write the file --out
names. `validate` takes no filters: a trace's integrity is the whole trace's.

This module imports click and nothing heavy: a command's module (and pandas, DuckDB, the
engines) is imported only when that command runs, so `spiketrace --help` answers at once.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from importlib import import_module

import click

from spiketrace.analyze.present.safe_text import NonFiniteError, json_text, safe, safe_line

# command -> (module that defines it, its one-line help for `spiketrace --help`; a test checks
# these lines are the commands' own)
COMMANDS = {
    "collectives": ("spiketrace.analyze.cli.trace_commands",
                    "Collective communication of TRACE (DDP, FSDP): calls and bytes per rank, stage and kind."),
    "compact": ("spiketrace.analyze.cli.maintenance", "Merge TRACE's small committed parts into few, atomically."),
    "compare": ("spiketrace.analyze.cli.compare",
                "Energy per sample of TRACE under chip presets and the paper convention, one row per preset."),
    "counts": ("spiketrace.analyze.cli.counts", "Count operations (FLOPs, MACs, ACs, ...) of TRACE by module, op or stage."),
    "demo": ("spiketrace.analyze.cli.demo", "Capture the built-in spiking MLP's training step into OUT and summarise it."),
    "diff": ("spiketrace.analyze.cli.report", "What changed from trace A to trace B; exit 1 when a --fail-if holds."),
    "energy": ("spiketrace.analyze.cli.energy", "Energy of TRACE under one preset, by component, stage or module."),
    "info": ("spiketrace.analyze.cli.trace_commands", "Summarise TRACE: manifest facts, ops, stages and modules."),
    "neurobench": ("spiketrace.analyze.cli.neurobench",
                   "NeuroBench's metrics of TRACE: Footprint, ConnectionSparsity, ParameterCount, SynapticOperations, ..."),
    "plot": ("spiketrace.analyze.cli.plots", "Draw one figure of TRACE (or of a recost result) into --out."),
    "presets": ("spiketrace.analyze.cli.energy", "Hardware presets: list, show, validate, import-zigzag."),
    "recost": ("spiketrace.analyze.cli.energy", "Cost TRACE under many presets or a sweep; the trace is mapped once."),
    "report": ("spiketrace.analyze.cli.report", "One self-contained HTML page: summary, caveats, breakdowns, plots."),
    "sql": ("spiketrace.analyze.cli.trace_commands", "Run a DuckDB query over TRACE's views (no query: open the shell)."),
    "validate": ("spiketrace.analyze.cli.trace_commands",
                 "Check TRACE deeply (counts, unique ids, references); exit 1 on problems."),
    "views": ("spiketrace.analyze.cli.trace_commands", "List the named breakdown views every trace has."),
}
# spiketrace.analyze.energy.MODELS (a test keeps them equal)
MODEL_NAMES = ("chip", "compute", "lemaire", "neuromc", "paper", "spikesim")


class CommandUnavailable(RuntimeError):
    """A command cannot run on this machine (the demo without torch, the shell without duckdb)."""


def _reported_errors() -> tuple[type[BaseException], ...]:
    """The errors that are the input's fault: shown as their message alone (imported late)."""
    import duckdb

    from spiketrace.analyze.many.engines import EngineUnavailable
    from spiketrace.analyze.present.selection import SelectionError
    from spiketrace.analyze.presets import PresetError
    from spiketrace.analyze.trace import TraceError
    from spiketrace.schemas.version import SchemaVersionError

    return (TraceError, SchemaVersionError, duckdb.Error, FileNotFoundError, PresetError, CommandUnavailable,
            NonFiniteError, EngineUnavailable, SelectionError)


def one_line(exc: BaseException) -> str:
    """The message of `exc` on one line (DuckDB's carry the query and a caret below)."""
    lines = []
    for line in str(exc).splitlines():
        if line.startswith("LINE "):
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines) or type(exc).__name__


class SpiketraceGroup(click.Group):
    """Loads each command's module on first use, and reports errors as one line with exit
    code 2, unless --debug (then the traceback). The expected ones (a bad trace, preset or
    query) print their message; anything else also names its type and suggests --debug."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.commands and name in COMMANDS:
            import_module(COMMANDS[name][0])  # its @main.command() registers it
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1] if name in COMMANDS else self.commands[name].get_short_help_str())
                for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `spiketrace ... | head`: the reader left, nothing to report
            sys.stderr.close()
            ctx.exit(0)
        except Exception as exc:  # one line for users; --debug shows the traceback
            if (ctx.obj or {}).get("debug"):
                raise
            if isinstance(exc, _reported_errors()):  # a PresetError: one line per problem
                for line in getattr(exc, "problems", None) or [one_line(exc)]:
                    click.echo(f"error: {safe_line(line)}", err=True)
            else:
                click.echo(f"error: {type(exc).__name__}: {safe_line(one_line(exc))} "
                           "(run with --debug for the traceback)", err=True)
            ctx.exit(2)


def _table(frame) -> str:
    """`frame` as aligned text; its strings (trace data) shown `safe`, one line per row."""
    frame = frame.rename(columns=safe_line)
    if frame.empty:
        return "(no rows)" if frame.columns.empty else "  ".join(frame.columns) + "\n(no rows)"
    frame = frame.copy()
    for i in range(frame.shape[1]):
        if frame.iloc[:, i].dtype.kind not in "biufcmM":  # text (and lists): no newline or escape of its own
            frame.isetitem(i, frame.iloc[:, i].map(lambda v: safe_line(v) if isinstance(v, str) else v))
    return safe(frame.to_string(index=False))


def _warn(trace) -> None:
    """What the capture said about itself (a DEGRADED capture first), then the reader's warnings:
    on stderr, so stdout stays the table."""
    from spiketrace.analyze.present.health import health_lines

    for line in health_lines(trace.health()):
        click.echo(safe_line(line), err=True)
    for warning in trace.warnings:
        click.echo(f"warning: {safe_line(warning)}", err=True)


def warn_traces(traces) -> None:
    """_warn for each of several traces' facts (spiketrace.analyze.many.TraceFacts), each line naming its
    trace when there are several."""
    from spiketrace.analyze.present.health import health_lines

    for facts in traces:
        prefix = f"{facts.label}: " if len(traces) > 1 else ""
        for line in health_lines(facts.health):
            click.echo(safe_line(prefix + line), err=True)
        for warning in facts.warnings:
            click.echo(f"warning: {safe_line(prefix + warning)}", err=True)


def engine_options(command):
    """--engine, --scheduler and --workers on a command that takes several traces; the command
    gets `execution`: spiketrace.analyze.many's engine=, scheduler=, workers= and how to open each trace
    (run=, verify=, from --run and --verify: a cluster worker has no CLI context of its own)."""

    @click.option("--engine", type=click.Choice(["in-process", "dask"]), default=None,
                  help="Where traces are evaluated: in this process (default), or on a Dask cluster, one task per "
                       "(trace, rank) (pip install -e '.[cluster]'); --scheduler or --workers imply dask.")
    @click.option("--scheduler", metavar="ADDRESS", help="The scheduler of a running Dask cluster (tcp://host:8786).")
    @click.option("--workers", type=click.IntRange(min=1), metavar="N",
                  help="A local Dask cluster of N worker processes (default: one per two cores).")
    @functools.wraps(command)
    def with_engine_options(*args, engine, scheduler, workers, **kwargs):
        if scheduler and workers:
            raise click.UsageError("--scheduler and --workers exclude each other: a scheduler's workers are its own")
        if engine == "in-process" and (scheduler or workers):
            raise click.UsageError("--scheduler and --workers are for --engine dask")
        params = click.get_current_context().params
        execution = {"engine": engine or ("dask" if scheduler or workers else "in-process"), "scheduler": scheduler,
                     "workers": workers, "run": params.get("run_id"), "verify": params.get("verify")}
        return command(*args, execution=execution, **kwargs)

    return with_engine_options


def recompute_option():
    """--recompute: what counts and energies do with the work activation checkpointing recomputed."""
    return click.option(
        "--recompute", type=click.Choice(["include", "exclude", "only"]), default=None,
        help="Work torch.utils.checkpoint recomputed during backward: include it (default: it ran; neuromc "
             "under --compat spikingjelly excludes it, as SpikingJelly does), exclude it (each forward once), "
             "or only it.")


def trace_options(command):
    """--run and --verify/--no-verify on a command that opens traces: every trace it opens
    (deep inside analyses, reports and diffs too) is opened so (spiketrace.analyze.trace.reader.open_defaults)."""

    @click.option("--run", "run_id", metavar="ID", default=None,
                  help="Open only capture run ID (or a unique prefix of it) of a directory holding shards of several.")
    @click.option("--verify/--no-verify", default=True, show_default=True,
                  help="Check every part's checksum on open (it reads every byte); --no-verify for a trace you trust.")
    @functools.wraps(command)
    def with_trace_options(*args, run_id, verify, **kwargs):
        from spiketrace.analyze.trace.reader import open_defaults

        with open_defaults(run=run_id, verify=verify):
            return command(*args, **kwargs)

    return with_trace_options


def selection_options(command):
    """--stage, --phase, --step, --rank and --module, the same on every command that reads a
    trace; the command gets `selection`, an spiketrace.analyze.present.selection.Selection."""

    @click.option("--stage", metavar="NAME", help="Only the work of stage NAME (e.g. forward; `spiketrace info "
                  "TRACE` lists the stages).")
    @click.option("--phase", metavar="PHASE", help="Only the work of phase PHASE: forward, backward or optimizer.")
    @click.option("--step", type=click.IntRange(min=0), metavar="N", help="Only recorder step N.")
    @click.option("--rank", type=click.IntRange(min=0), metavar="R", help="Only rank R of a multi-process trace.")
    @click.option("--module", metavar="SCOPE", help="Only the work attributed to module SCOPE and its sub-modules "
                  "(a tracker name such as Net.fc1; Global is everything).")
    @functools.wraps(command)
    def with_selection(*args, stage, phase, step, rank, module, **kwargs):
        from spiketrace.analyze.present.selection import Selection

        return command(*args, selection=Selection(stage, phase, step, rank, module), **kwargs)

    return with_selection


def selected_traces(selection, traces, execution: dict, *, energy: bool = False) -> dict:
    """selection.check over several traces (paths), each opened as the engines open it (its
    --run, without checksums: the evaluation checks the parts it reads); then the options of
    the analyses: an energy model's (stage, step, rank) when `energy`, else the counters'."""
    if not selection:
        return {}
    from spiketrace.analyze.trace import open_trace

    with contextlib.ExitStack() as stack:
        opened = [stack.enter_context(open_trace(path, run=execution.get("run"), verify=False)) for path in traces]
        selection.check(*opened)
        return selection.energy_options(*opened) if energy else selection.counts_options()


FORMAT_HELP = {
    "table": "aligned text (the default)",
    "csv": "CSV rows",
    "json": "JSON",
    "parquet": "a Parquet file (needs --out)",
    "markdown": "a Markdown table (--model paper)",
    "latex": "a LaTeX booktabs table (--model paper)",
}


def output_options(*choices: str):
    """--format (one of `choices`, table by default) and --out FILE; the command gets
    `output_format` and `out` (emit_text and emit_frame write there)."""

    def decorate(command):
        @click.option("--format", "output_format", type=click.Choice(choices), default="table", show_default=True,
                      help="Output: " + "; ".join(f"{c}: {FORMAT_HELP[c]}" for c in choices) + ".")
        @click.option("--out", type=click.Path(dir_okay=False), metavar="FILE",
                      help="Write the output to FILE instead of stdout.")
        @functools.wraps(command)
        def with_output(*args, output_format, out, **kwargs):
            if output_format == "parquet" and not out:
                raise click.UsageError("--format parquet needs --out FILE")
            return command(*args, output_format=output_format, out=out, **kwargs)

        return with_output

    return decorate


def emit_text(text: str, out: str | None) -> None:
    """`text` (and a newline) on stdout, or into the file `out`."""
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    else:
        click.echo(text)


def emit_frame(frame, output_format: str, out: str | None) -> None:
    """A data frame as --format says: csv, parquet (into `out`), json (a list of row objects)
    or table."""
    if output_format == "parquet":
        frame.to_parquet(out, index=False)
    elif output_format == "csv":
        if out:
            frame.to_csv(out, index=False)
        else:
            click.echo(frame.to_csv(index=False), nl=False)
    elif output_format == "json":
        emit_text(json_text(frame.to_dict("records"), indent=1, default=str), out)
    else:
        emit_text(_table(frame), out)


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {safe_line(message)}", err=True)
    sys.exit(code)


@click.group(cls=SpiketraceGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spiketrace", prog_name="spiketrace")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Analyse spiketrace traces (Parquet directories written by `capture`).

    Start with `spiketrace demo /tmp/demo --force`, then `spiketrace energy /tmp/demo`.
    `spiketrace COMMAND -h` shows a command's options and an example."""
    ctx.obj = {"debug": debug}


def with_flags(flags):
    """One decorator applying click options `flags` (a tuple of click.option(...)) in their order,
    for options two commands share."""

    def decorate(command):
        for flag in reversed(flags):
            command = flag(command)
        return command

    return decorate


def model_option(what: str = "Energy model"):
    """--model, a checked choice; unset, the trace decides (energy/scopes.py)."""
    return click.option("--model", type=click.Choice(MODEL_NAMES), default=None,
                        help=f"{what} (default: neuromc for a training trace, compute for a forward-only one).")


@contextlib.contextmanager
def warnings_to_stderr():
    """Python warnings raised inside (a model's scope, ...) printed once each as `warning: ...`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for message in dict.fromkeys(str(w.message) for w in caught):
        click.echo(f"warning: {safe_line(message)}", err=True)
