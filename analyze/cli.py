"""The `spiketrace` command line: a thin layer over analyze.trace.

Exit codes: 0 success; 1 `validate` found problems; 2 the trace could not be opened or the
query failed (one line `error: ...` on stderr; `spiketrace --debug ...` shows the traceback).

`info --format json` prints one object: {"trace": Trace.summary(), "ops": [{"op", "count"}],
"stages": [rows of the stages view]}. `sql --format json` prints a list of row objects.
`counts --format json` prints the document of analyze.counts_view (docs/counts_json.md); counts
exits 1 when --strict or --min-coverage is not met.
"""

from __future__ import annotations

import datetime
import json
import sys

import click
import duckdb
import pandas as pd

from analyze import counts_view
from analyze.breakdown import MODULE_BREAKDOWN_QUERY, module_breakdown
from analyze.counters import count
from analyze.trace import OP_COUNTS_QUERY, STAGES_QUERY, Trace, TraceError, open_trace
from analyze.presets import PresetError
from schemas.version import SchemaVersionError

REPORTED_ERRORS = (TraceError, SchemaVersionError, duckdb.Error, FileNotFoundError, PresetError)


class DemoUnavailable(RuntimeError):
    """`spiketrace demo` cannot run here (capture or torch missing)."""


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
    """Reports errors as one line and exit code 2, unless --debug (then the traceback).

    The expected ones (a bad trace, preset or query) print their message; anything else also
    names its type and suggests --debug, so a bug is still visible."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `spiketrace ... | head`: the reader left, nothing to report
            sys.stderr.close()
            ctx.exit(0)
        except (*REPORTED_ERRORS, DemoUnavailable, ShellUnavailable) as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            click.echo(f"error: {one_line(exc)}", err=True)
            ctx.exit(2)
        except Exception as exc:  # noqa: BLE001 - one line for users; --debug shows the traceback
            if (ctx.obj or {}).get("debug"):
                raise
            click.echo(f"error: {type(exc).__name__}: {one_line(exc)} (run with --debug for the traceback)", err=True)
            ctx.exit(2)


def _time(epoch) -> str | None:
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).isoformat(timespec="seconds")


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(no rows)" if frame.columns.empty else "  ".join(frame.columns) + "\n(no rows)"
    return frame.to_string(index=False)


def _fields(mapping: dict) -> str:
    width = max(map(len, mapping))
    return "\n".join(f"{key:<{width}}  {value}" for key, value in mapping.items())


def _rows(trace: Trace, query: str) -> list[dict]:
    return trace.arrow(query).to_pylist()


def _warn(trace: Trace) -> None:
    for warning in trace.warnings:
        click.echo(f"warning: {warning}", err=True)


def print_info(trace: Trace, output_format: str) -> None:
    summary = trace.summary()
    if output_format == "json":
        document = {
            "trace": summary,
            "ops": _rows(trace, OP_COUNTS_QUERY),
            "stages": _rows(trace, STAGES_QUERY),
            "modules": _rows(trace, MODULE_BREAKDOWN_QUERY),
        }
        click.echo(json.dumps(document, indent=1, default=str))
        return
    facts = {key: summary[key] for key in ("path", "status", "schema_version", "device", "ranks", "world_size")}
    if summary["status"] == "mixed":
        facts["status"] = ", ".join(f"rank {r}: {s}" for r, s in summary["rank_status"].items())
    facts |= {
        "started_at": _time(summary["started_at"]),
        "ended_at": _time(summary["ended_at"]),
        "steps_recorded": summary["steps_recorded"],
        "versions": json.dumps(summary["versions"]),
        "metadata": json.dumps(summary["metadata"], default=str),
    }
    click.echo(_fields(facts))
    for warning in summary["warnings"]:
        click.echo(f"warning: {warning}")
    click.echo("\ncounts:")
    click.echo(_fields(summary["counts"]))
    click.echo("\nops:")
    click.echo(_table(trace.op_counts()))
    click.echo("\nstages:")
    click.echo(_table(trace.stages()))
    click.echo("\nops per module scope (SpikingJelly attribution) and output spike rate:")
    click.echo(_table(module_breakdown(trace)))


@click.group(cls=SpiketraceGroup)
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Analyse spiketrace traces (Parquet directories written by `capture`)."""
    ctx.obj = {"debug": debug}


@main.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def info(trace_path: str, output_format: str) -> None:
    """Summarise TRACE: manifest facts, counts, the ops seen and the stages."""
    with open_trace(trace_path) as trace:
        print_info(trace, output_format)


class ShellUnavailable(RuntimeError):
    """`spiketrace sql TRACE` without a query needs the duckdb command-line shell."""


def _shell(trace_path: str) -> None:
    """Open the duckdb CLI with every view of the trace defined (an init script of their SQL)."""
    import os
    import shutil
    import tempfile

    binary = shutil.which("duckdb")
    if binary is None:
        raise ShellUnavailable(
            "no `duckdb` shell on PATH: install the DuckDB CLI (https://duckdb.org/docs/installation, "
            "e.g. `curl https://install.duckdb.org | sh`), or pass a QUERY"
        )
    with open_trace(trace_path) as trace:
        schemas = trace.con.execute(
            "SELECT DISTINCT schema_name FROM duckdb_tables() WHERE NOT internal AND schema_name <> 'main'").fetchall()
        tables = [(f"CREATE SCHEMA IF NOT EXISTS {name}",) for (name,) in schemas]
        tables += trace.con.execute("SELECT sql FROM duckdb_tables() WHERE NOT internal").fetchall()
        views = trace.con.execute(
            "SELECT sql FROM duckdb_views() WHERE NOT internal AND schema_name = 'main' ORDER BY view_oid").fetchall()
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="spiketrace-", delete=False) as script:
        for (statement,) in tables + views:
            script.write(statement.rstrip().rstrip(";") + ";\n")
        script.write(".print 'spiketrace: views of the trace are defined; try  SELECT * FROM module_ops LIMIT 10;'\n")
    os.execv(binary, [binary, "-init", script.name])


@main.command()
def views() -> None:
    """List the named breakdown views every trace has (spiketrace sql TRACE 'SELECT * FROM NAME')."""
    from analyze.trace.views import sql_views

    from analyze.result_tables import result_views

    shipped = sql_views()
    shipped.update({name: (f"{summary} (needs the energy table)", q) for name, (summary, q) in result_views().items()})
    shipped["counts"] = ("the counters' tidy results: counter, scope, op, stage, value (computed on demand)", "")
    shipped["energy"] = ("one energy report as rows: model, preset, breakdown, key, pj, count (on demand)", "")
    width = max(map(len, shipped))
    for name, (summary, _) in shipped.items():
        click.echo(f"{name:<{width}}  {summary}")


@main.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.argument("query", required=False)
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option("--model", default="compute", show_default=True, help="Energy model of the `energy` table.")
@click.option("--preset", metavar="NAME|FILE", help="Preset of the `energy` table (default: the model's).")
def sql(trace_path: str, query: str | None, output_format: str, model: str, preset: str | None) -> None:
    """Run QUERY (DuckDB SQL over the trace's views) and print the result; with no QUERY,
    open the duckdb shell on the views."""
    if query is None:
        _shell(trace_path)
        return
    with open_trace(trace_path) as trace:
        from analyze.result_tables import ensure_for_query

        ensure_for_query(trace, query, model=model, preset=preset)  # `counts`, `energy` and its views, computed when named
        _warn(trace)
        if output_format == "json":
            click.echo(json.dumps(trace.arrow(query).to_pylist(), indent=1, default=str))
        elif output_format == "csv":
            click.echo(trace.sql(query).to_csv(index=False), nl=False)
        else:
            click.echo(_table(trace.sql(query)))


@main.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path())
def validate(trace_path: str) -> None:
    """Check TRACE deeply (counts, unique ids, references); exit 1 on problems."""
    with open_trace(trace_path) as trace:
        _warn(trace)
        problems = trace.validate()
        for problem in problems:
            click.echo(problem)
        if problems:
            sys.exit(1)
        counts = ", ".join(f"{trace.count(table)} {table}" for table in trace.parts)
        click.echo(f"OK: {trace.path} (ranks {trace.ranks}; {counts})")


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


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@main.command()
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--counter", "counter_names", multiple=True, metavar="NAMES",
              help="Counters to run, comma separated or repeated (default: all of analyze.counters.COUNTERS).")
@click.option("--by", "view", type=click.Choice(counts_view.VIEWS), default="scope", show_default=True,
              help="Table: module tree, top ops, stages, or module classes.")
@click.option("--depth", type=click.IntRange(min=0), help="--by scope: deepest level shown (Global is 0).")
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, help="Ops shown per counter (--by op, and uncovered ops in the coverage block).")
@click.option("--stage", help="Only events of this stage.")
@click.option("--phase", help="Only events of this phase.")
@click.option("--step", type=int, help="Only events of this step.")
@click.option("--rank", type=int, help="Only events of this rank.")
@click.option("--module", metavar="SCOPE", help="Only events attributed to SCOPE (and so to its subtree).")
@click.option("--ops", multiple=True, metavar="GLOB", help="Only ops matching GLOB (a bare name matches as a prefix); repeatable.")
@click.option("--ignore-module", "ignore_modules", multiple=True, metavar="NAME",
              help="Skip events while a module of this class (qualified or bare name) or path runs; repeatable.")
@click.option("--compat", type=click.Choice(["spikingjelly"]), help="Count exactly as SpikingJelly 2.0.0 does.")
@click.option("--strict", is_flag=True, help="Exit 1 when some counter has no rule for an op of the selection.")
@click.option("--min-coverage", type=Fraction(), metavar="P",
              help="Exit 1 when a counter covers less than P of the calls (0..1 or a percentage like 95%).")
@click.option("--format", "output_format", type=click.Choice(["table", "csv", "json", "parquet"]), default="table",
              show_default=True, help="csv and parquet write the tidy frame (counter, scope, op, [stage,] value).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write to this file instead of stdout (parquet needs it).")
def counts(trace_path, counter_names, view, depth, top, stage, phase, step, rank, module, ops, ignore_modules,
           compat, strict, min_coverage, output_format, out) -> None:
    """Count operations (FLOPs, MACs, ACs, ...) of TRACE, per module scope, op or stage.

    Exit codes: 0 success; 1 --strict or --min-coverage not met (after printing the report);
    2 bad arguments (an unknown counter) or the trace could not be read."""
    if output_format == "parquet" and not out:
        raise click.UsageError("--format parquet needs --out FILE")
    names = [n.strip() for item in counter_names for n in item.split(",") if n.strip()] or None
    selection = {"stage": stage, "phase": phase, "step": step, "rank": rank, "module": module,
                 "ops": list(ops) or None, "ignore_modules": list(ignore_modules), "compat": compat}
    with open_trace(trace_path) as trace:
        _warn(trace)
        try:
            result = count(trace, names, by=("stage",) if view == "stage" else (), **selection)
        except ValueError as exc:
            _fail(one_line(exc), 2)
        names = names or counts_view.counter_names(result)
        if result.frame.empty and result.unsupported.empty:
            click.echo("warning: no events match the selection", err=True)
        document = counts_view.counts_json(result, trace, counters=names)
        fractions = {name: entry["coverage"] for name, entry in document["counters"].items()}
        if output_format in ("csv", "parquet"):
            frame = counts_view.tidy_frame(result, names)
            if output_format == "parquet":
                frame.to_parquet(out, index=False)
            elif out:
                frame.to_csv(out, index=False)
            else:
                click.echo(frame.to_csv(index=False), nl=False)
        else:
            if output_format == "json":
                text = json.dumps(document, indent=1)
            else:
                modules = counts_view.module_classes(trace)
                text = counts_view.table_text(result, view, depth, top, modules=modules, coverage=fractions, counters=names)
            if out:
                with open(out, "w") as handle:
                    handle.write(text + "\n")
            else:
                click.echo(text)
    problem = (counts_view.strict_problem(result) if strict else None) or (
        counts_view.coverage_problem(fractions, min_coverage) if min_coverage is not None else None)
    if problem:
        _fail(problem, 1)


@main.command()
@click.argument("out", type=click.Path())
@click.option("--format", "output_format", type=click.Choice(["table", "json"]), default="table")
def demo(out: str, output_format: str) -> None:
    """Capture a small spiking network's training step into OUT, then summarise it."""
    try:
        from capture.example import record_demo
    except ImportError as exc:
        raise DemoUnavailable(f"the demo needs the capture side and torch ({exc})") from exc
    with open_trace(record_demo(out)) as trace:
        print_info(trace, output_format)
        if output_format == "table":
            from analyze.energy import energy

            result = count(trace)
            click.echo("\noperation counts per module (offline, equal to SpikingJelly's counters):")
            click.echo(counts_view.table_text(result, "scope", 2, 3, coverage=counts_view.coverage(result)))
            report = energy(trace, "compute", "compute-fp32-45nm")
            click.echo(f"\ncompute energy (compute-fp32-45nm): {report.energy_total_pj / 1e6:.3f} uJ; by stage: "
                       + ", ".join(f"{k} {v / 1e6:.3f} uJ" for k, v in report.energy_by_stage.items()))
            click.echo(f"next: spiketrace counts {out} --by op | spiketrace energy {out} --by stage | "
                       f"spiketrace report {out} --out report.html")


if __name__ == "__main__":
    main()


from analyze import cli_energy, cli_plots, cli_report  # noqa: E402  (their commands attach to main)

cli_energy.register(main)
cli_plots.register(main)
cli_report.register(main)
