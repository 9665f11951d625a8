"""The `spiketrace` command group and what every command shares: one-line errors with exit
code 2 (`--debug` shows the traceback), and the small text helpers.

Exit codes: 0 success; 1 a check or gate failed (`validate`, `counts --strict`, `diff
--fail-if`); 2 the trace, preset or query could not be used (one line `error: ...` on stderr).
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import click
import duckdb
import pandas as pd

from analyze.energy import MODELS
from analyze.presets import PresetError
from analyze.trace import Trace, TraceError
from schemas.version import SchemaVersionError

REPORTED_ERRORS = (TraceError, SchemaVersionError, duckdb.Error, FileNotFoundError, PresetError)


class CommandUnavailable(RuntimeError):
    """A command cannot run on this machine (the demo without torch, the shell without duckdb)."""


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
        except (*REPORTED_ERRORS, CommandUnavailable) as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            click.echo(f"error: {one_line(exc)}", err=True)
            ctx.exit(2)
        except Exception as exc:  # noqa: BLE001 - one line for users; --debug shows the traceback
            if (ctx.obj or {}).get("debug"):
                raise
            click.echo(f"error: {type(exc).__name__}: {one_line(exc)} (run with --debug for the traceback)", err=True)
            ctx.exit(2)


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


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)




@click.group(cls=SpiketraceGroup)
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Analyse spiketrace traces (Parquet directories written by `capture`)."""
    ctx.obj = {"debug": debug}




def model_option(what: str = "Energy model"):
    """--model, a checked choice; unset, the trace decides (energy/scopes.py)."""
    return click.option("--model", type=click.Choice(sorted(MODELS)), default=None,
                        help=f"{what} (default: neuromc for a training trace, compute for a forward-only one).")


@contextlib.contextmanager
def warnings_to_stderr():
    """Python warnings raised inside (a model's scope, ...) printed once each as `warning: ...`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for message in dict.fromkeys(str(w.message) for w in caught):
        click.echo(f"warning: {message}", err=True)
