"""Commands that read a trace as it is: info, views, sql, validate, collectives.

`info --format json` prints one object: {"trace": Trace.summary() (with Trace.health():
degraded, compiled, compiled_seen, tracker_underflows), "ops": [{"op", "count"}] (every op),
"markers": [{"op", "count"}] (those of them that are torch.profiler markers: no work), "stages":
[rows of the stages view], "modules": [...], "collectives": [per kind: calls, input_bytes,
output_bytes, bus_bytes], "selection": {the filters given; only when some were}}. `sql` and
`collectives --format json` print a list of row objects; `validate --format json` one object:
{"ok", "path", "ranks", "complete", "counts": {table: rows}, "problems": [str], "degraded": str
or null, "strict": str or null (why --strict failed)}. JSON output never holds NaN or Infinity
(analyze/present/safe_text.py: exit 2).

info, sql and collectives take the filters (--stage --phase --step --rank --module): their
queries run over views that show only the selected rows (analyze/trace/views.py,
selected_views); `sql`'s `counts` and `energy` tables are computed for the selection.
`validate` takes none: it checks the whole trace.

What the capture said about itself (analyze/present/health.py) goes to stderr before the
numbers: a DEGRADED capture, torch.compile seen, SpikingJelly tracker underflows. `validate`
passes a degraded trace (it is readable and consistent) with "OK (degraded: ...)"; with
--strict a degraded or incomplete capture exits 1.

`sql` spills into a temp directory of its own process, capped by --max-temp-size and removed
on exit; one a killed run left behind is removed by the next `sql`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading

import click
import pandas as pd

from spiketrace.analyze.cli.app import (
    CommandUnavailable,
    _fail,
    _table,
    _warn,
    emit_frame,
    emit_text,
    main,
    model_option,
    output_options,
    selection_options,
    trace_options,
    warnings_to_stderr,
)
from spiketrace.analyze.present.health import degraded_summary, health_facts, health_lines
from spiketrace.analyze.present.safe_text import json_text, safe_line
from spiketrace.analyze.trace import MARKERS_QUERY, OP_COUNTS_QUERY, STAGES_QUERY, Trace, open_trace
from spiketrace.analyze.trace.breakdown import MODULE_BREAKDOWN_QUERY, module_breakdown
from spiketrace.analyze.trace.spill import remove_orphans


def _time(epoch) -> str | None:
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="seconds")


def _fields(mapping: dict) -> str:
    width = max(map(len, mapping))
    return "\n".join(f"{safe_line(key):<{width}}  {safe_line(value)}" for key, value in mapping.items())


def _rows(trace: Trace, query: str) -> list[dict]:
    return trace.arrow(query).to_pylist()


COLLECTIVES_QUERY = "SELECT * FROM collective_traffic ORDER BY rank, stage, phase, kind"
COLLECTIVE_TOTALS_QUERY = """
SELECT kind, sum(calls)::BIGINT AS calls, sum(input_bytes)::BIGINT AS input_bytes,
       sum(output_bytes)::BIGINT AS output_bytes, sum(bus_bytes)::BIGINT AS bus_bytes
FROM collective_traffic GROUP BY kind ORDER BY kind
"""


def print_info(trace: Trace, output_format: str, selection=None, out: str | None = None) -> None:
    """The summary of `trace` (of its selected rows, when views are restricted to `selection`)."""
    summary = trace.summary()
    if selection:  # the manifests count every row; the views hold the selection's
        counted = trace.con.execute("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM modules)").fetchall()[0]
        summary["counts"] |= {"events": counted[0], "modules": counted[1]}
    chosen = selection.as_dict() if selection else {}
    collectives = _rows(trace, COLLECTIVE_TOTALS_QUERY)
    if output_format == "json":
        document = {
            "trace": summary,
            "ops": _rows(trace, OP_COUNTS_QUERY),
            "markers": _rows(trace, MARKERS_QUERY),
            "stages": _rows(trace, STAGES_QUERY),
            "modules": _rows(trace, MODULE_BREAKDOWN_QUERY),
            "collectives": collectives,
            **({"selection": chosen} if chosen else {}),
        }
        emit_text(json_text(document, indent=1, default=str), out)
        return
    for line in health_lines(summary):  # stderr: stdout stays the summary
        click.echo(safe_line(line), err=True)
    facts = {key: summary[key] for key in ("path", "status", "schema_version", "device", "ranks", "world_size")}
    if summary["status"] == "mixed":
        facts["status"] = ", ".join(f"rank {r}: {s}" for r, s in summary["rank_status"].items())
    facts |= {
        "started_at": _time(summary["started_at"]),
        "ended_at": _time(summary["ended_at"]),
        "steps_recorded": summary["steps_recorded"],
        "versions": json.dumps(summary["versions"]),
        "metadata": json.dumps(summary["metadata"], default=str),
        **health_facts(summary, trace.manifests),
    }
    if selection:
        facts["selection"] = selection.describe()
    lines = [_fields(facts)]
    lines += [f"warning: {safe_line(warning)}" for warning in summary["warnings"]]
    lines += ["\ncounts:" + (" (of the selection)" if selection else ""), _fields(summary["counts"])]
    if collectives:
        lines += ["\ncollectives (all ranks; bytes; bus: per-link traffic of a ring algorithm):",
                  _table(pd.DataFrame(collectives))]
    ops, markers = trace.op_counts(), trace.sql(MARKERS_QUERY)
    lines += ["\nops:", _table(ops[~ops["op"].isin(markers["op"])].reset_index(drop=True))]
    if len(markers):
        lines += ["\nprofiler markers (torch.profiler record_function ranges, optimizer.step()'s too: they mark, "
                  "they do no work):",
                  _table(markers)]
    lines += ["\nstages:", _table(trace.stages()),
              "\nops per module scope (SpikingJelly attribution) and output spike rate (—: no binary output):",
              _table(_rates_shown(module_breakdown(trace)))]
    emit_text("\n".join(lines), out)


def _rates_shown(breakdown: pd.DataFrame) -> pd.DataFrame:
    """The module table as text shows it: a scope with no binary output (a Linear, a container,
    Global) has no spike rate, "—" rather than NaN."""
    rates = breakdown["spike_rate"].map(lambda rate: "—" if pd.isna(rate) else f"{rate:.4f}")
    return breakdown.assign(spike_rate=rates)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@selection_options
@output_options("table", "json")
def info(trace_path: str, selection, output_format: str, out: str | None) -> None:
    """Summarise TRACE: manifest facts, ops, stages and modules.

    With filters, the counts, ops, stages and modules of the selected rows only.

    Example: spiketrace info runs/step --format json; spiketrace info runs/step --phase backward --rank 0"""
    with open_trace(trace_path) as trace:
        selection.check(trace)
        with selection.views(trace):
            print_info(trace, output_format, selection, out)


def _shell(trace_path: str, max_temp_size: str = "2GB", selection=None) -> None:
    """Open the duckdb CLI with every view of the trace defined (an init script of their SQL;
    with a selection, the views of its rows), its spilling capped at `max_temp_size`."""
    binary = shutil.which("duckdb")
    if binary is None:
        raise CommandUnavailable(
            "no `duckdb` shell on PATH: install the DuckDB CLI (https://duckdb.org/docs/installation, "
            "e.g. `curl https://install.duckdb.org | sh`), or pass a QUERY"
        )
    with open_trace(trace_path) as trace:
        if selection:
            selection.check(trace)
        with selection.views(trace) if selection else contextlib.nullcontext():
            statements = _definitions(trace)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="spiketrace-", delete=False) as script:
        for statement in statements:
            script.write(statement.rstrip().rstrip(";") + ";\n")
        script.write(f"SET max_temp_directory_size = '{max_temp_size}';\n")
        script.write(".print 'spiketrace: views of the trace are defined; try  SELECT * FROM module_ops LIMIT 10;'\n")
    os.execv(binary, [binary, "-init", script.name])


def _definitions(trace: Trace) -> list[str]:
    """The SQL that defines the trace's schemas, tables and views in another DuckDB, in an
    order it can run: the shell binds a view when it is created, so the whole tables' views
    (of a selection) first, then the table views (events first: the others' selections read
    it), then the views over them."""
    from spiketrace.analyze.trace.views import TABLES, UNSELECTED_SCHEMA, view_name

    schemas = trace.con.execute("SELECT DISTINCT schema_name FROM duckdb_tables() WHERE NOT internal "
                                "AND schema_name <> 'main' UNION SELECT DISTINCT schema_name FROM duckdb_views() "
                                "WHERE NOT internal AND schema_name <> 'main' ORDER BY 1").fetchall()
    statements = [f"CREATE SCHEMA IF NOT EXISTS {name}" for (name,) in schemas]
    statements += [sql for (sql,) in trace.con.execute("SELECT sql FROM duckdb_tables() WHERE NOT internal").fetchall()]
    table_views = {view_name(table) for table in TABLES}
    rows = trace.con.execute("SELECT schema_name, view_name, sql, view_oid FROM duckdb_views() WHERE NOT internal "
                             f"AND schema_name IN ('main', '{UNSELECTED_SCHEMA}')").fetchall()
    rows.sort(key=lambda row: (row[0] != UNSELECTED_SCHEMA, row[1] not in table_views, row[1] != "events", row[3]))
    return statements + [sql for _, _, sql, _ in rows]


@main.command()
def views() -> None:
    """List the named breakdown views every trace has.

    Example: spiketrace views; then spiketrace sql TRACE 'SELECT * FROM module_ops'"""
    from spiketrace.analyze.present.sql_tables import result_views
    from spiketrace.analyze.trace.views import sql_views

    shipped = sql_views()
    shipped.update({name: (f"{summary} (needs the energy table)", q) for name, (summary, q) in result_views().items()})
    shipped["counts"] = ("the counters' tidy results: counter, scope, op, stage, value (computed on demand)", "")
    shipped["energy"] = ("one energy report as rows: model, preset, breakdown, key, pj, count (on demand)", "")
    width = max(map(len, shipped))
    for name, (summary, _) in shipped.items():
        click.echo(f"{name:<{width}}  {summary}")


TEMP_PREFIX = "spiketrace-sql-"  # + pid + "-" + random: one folder per process
_SIZE = re.compile(r"\d+(\.\d+)?\s?(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)", re.ASCII)


def _size(ctx, param, value: str) -> str:
    if not _SIZE.fullmatch(value.strip()):
        raise click.BadParameter(f"{value!r} is not a size such as 500MB or 2GB")
    return value.strip()


@contextlib.contextmanager
def _scratch():
    """A temp folder of this process's own, removed on exit (SIGTERM too: it becomes an exit)."""
    remove_orphans(TEMP_PREFIX)
    folder = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-")
    main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number)) if main_thread else None
    try:
        yield folder
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        shutil.rmtree(folder, ignore_errors=True)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.argument("query", required=False)
@selection_options
@output_options("table", "csv", "json", "parquet")
@model_option("Energy model of the `energy` table")
@click.option("--preset", metavar="NAME|FILE", help="Preset of the `energy` table (default: the model's).")
@click.option("--max-temp-size", default="2GB", show_default=True, callback=_size, metavar="SIZE",
              help="Most disk a query may spill to (DuckDB max_temp_directory_size), e.g. 500MB.")
def sql(trace_path: str, query: str | None, selection, output_format: str, out: str | None, model: str,
        preset: str | None, max_temp_size: str) -> None:
    """Run a DuckDB query over TRACE's views (no query: open the shell).

    With filters, every view shows the selected rows only (events, stages, module_ops, ...),
    and the `counts` and `energy` tables are those of the selection.

    Example: spiketrace sql runs/step "SELECT op, count(*) FROM events GROUP BY op" --format csv --phase backward"""
    if query is None:
        _shell(trace_path, max_temp_size, selection)
        return
    with _scratch() as folder, open_trace(trace_path) as trace:
        trace.con.execute(f"SET temp_directory = '{folder.replace(chr(39), chr(39) * 2)}'")
        trace.con.execute(f"SET max_temp_directory_size = '{max_temp_size}'")
        from spiketrace.analyze.present.sql_tables import ensure_for_query

        selection.check(trace)
        with warnings_to_stderr():  # `counts`, `energy` and its views, computed when named
            ensure_for_query(trace, query, model=model, preset=preset, selection=selection)
        _warn(trace)
        with selection.views(trace):
            if output_format in ("json", "parquet"):  # from Arrow: lists stay lists, NULLs null
                table = trace.arrow(query)
                if output_format == "parquet":
                    import pyarrow.parquet as pq

                    pq.write_table(table, out)
                else:
                    emit_text(json_text(table.to_pylist(), indent=1, default=str,
                                        hint="use --format csv, or isnan() in the query"), out)
            else:
                emit_frame(trace.sql(query), output_format, out)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@click.option("--strict", is_flag=True, help="Also exit 1 when the capture was degraded (it failed internally "
              "and the trace misses that work) or did not finish (incomplete).")
@output_options("table", "json")
def validate(trace_path: str, strict: bool, output_format: str, out: str | None) -> None:
    """Check TRACE deeply (counts, unique ids, references); exit 1 on problems.

    A degraded capture (its own failures, listed on stderr) is readable and consistent: it
    passes, as "OK (degraded: ...)", unless --strict. validate takes no --stage/--phase/--step/
    --rank/--module: a trace's integrity is that of all its rows.

    Example: spiketrace validate runs/step --strict"""
    with open_trace(trace_path) as trace:
        _warn(trace)
        problems = trace.validate()
        counts = {table: trace.count(table) for table in trace.parts}
        degraded = degraded_summary(trace.health())
        failed = None if problems else ("the capture was degraded" if degraded else
                                        "the capture did not finish" if not trace.complete else None)
        failed = failed if strict else None
        if output_format == "json":
            emit_text(json_text({"ok": not problems, "path": str(trace.path), "ranks": trace.ranks,
                                 "complete": bool(trace.complete), "counts": counts, "problems": problems,
                                 "degraded": degraded, "strict": failed}, indent=1), out)
        elif problems:
            emit_text("\n".join(safe_line(problem) for problem in problems), out)
        else:
            listed = ", ".join(f"{n} {table}" for table, n in counts.items())
            emit_text(f"{f'OK (degraded: {degraded})' if degraded else 'OK'}: {safe_line(trace.path)} "
                      f"(ranks {trace.ranks}; {listed})", out)
    if problems:
        sys.exit(1)
    if failed:
        _fail(f"strict: {failed}", 1)


@main.command()
@trace_options
@click.argument("trace_path", metavar="TRACE", type=click.Path())
@selection_options
@output_options("table", "csv", "json", "parquet")
def collectives(trace_path: str, selection, output_format: str, out: str | None) -> None:
    """Collective communication of TRACE (DDP, FSDP): calls and bytes per rank, stage and kind.

    The rows of the collective_traffic view (spiketrace views); a single-process trace has none.
    With filters, the collectives of the selected events.

    Example: spiketrace collectives runs/ddp --format csv --phase backward"""
    with open_trace(trace_path) as trace:
        _warn(trace)
        selection.check(trace)
        with selection.views(trace):
            frame = trace.sql(COLLECTIVES_QUERY)
    if output_format == "table" and frame.empty:
        emit_text("(no collectives: the trace ran no torch.distributed communication"
                  + (" in the selection)" if selection else ")"), out)
    else:
        emit_frame(frame, output_format, out)
