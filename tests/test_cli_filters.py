"""The same filters (--stage --phase --step --rank --module) and --format choices on every
command that reads a trace, checked by running the installed `spiketrace`
as a user does, on a trace of two ranks and two training steps (stages forward, backward,
optimizer and eval, whose phase is forward).

The numbers a filter should give are computed independently: events by a DuckDB query over
the Parquet parts themselves (not the trace's views), counts with a rule of our own (one per
call of aten.mul.Tensor) against that query, energies against the breakdown the unfiltered
report gives (by stage, step and rank), the stages of a phase from the stage markers' files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import click
import duckdb
import pandas as pd
import pytest

from spiketrace.analyze.cli import main
from spiketrace.analyze.cli.app import COMMANDS
from spiketrace.analyze.present.units import format_energy
from tests.training_runs import record_ranks

FILTERS = ("--stage", "--phase", "--step", "--rank", "--module")
# command -> the --format choices it offers (None: it writes the file --out names)
TRACE_COMMANDS = {
    "info": ("table", "json"),
    "sql": ("table", "csv", "json", "parquet"),
    "collectives": ("table", "csv", "json", "parquet"),
    "counts": ("table", "csv", "json", "parquet"),
    "neurobench": ("table", "json"),  # --module refused: NeuroBench's metrics are the whole model's
    "energy": ("table", "csv", "json", "parquet", "markdown", "latex"),  # the last two: --model paper
    "compare": ("table", "csv", "json", "markdown"),
    "diff": ("table", "csv", "json", "parquet"),
    "recost": None,
    "report": None,
    "plot": None,
}
SELECTIONS = {  # one filter at a time, and two together
    "stage": ["--stage", "backward"],
    "phase": ["--phase", "forward"],
    "step": ["--step", "1"],
    "rank": ["--rank", "1"],
    "module": ["--module", "Sequential.2"],
    "stage and rank": ["--stage", "eval", "--rank", "0"],
}
MUL = "aten.mul.Tensor"


def spiketrace(*args, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run(["spiketrace", *map(str, args)], capture_output=True, text=True, timeout=300)
    assert done.returncode == code, (args, done.returncode, done.stderr[-2000:])
    return done


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return record_ranks(tmp_path_factory.mktemp("filters") / "train", 2, ranks=2)


def raw(trace: Path, query: str) -> list[tuple]:
    """`query` over the trace's Parquet files read directly: `events`, `scopes`, `stage_markers`."""
    con = duckdb.connect()
    for table in ("events", "scopes", "stage_markers"):
        files = str(trace / table / "rank=*" / "*.parquet")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}', hive_partitioning = true)")
    return con.execute(query).fetchall()


def where(selection: list[str]) -> str:
    """The SQL over the raw `events` that keeps what `selection` selects."""
    pairs = dict(zip(selection[::2], selection[1::2]))
    clauses = ["true"]
    for option, value in pairs.items():
        if option == "--module":
            clauses.append(f"(rank, scope_id) IN (SELECT rank, scope_id FROM scopes WHERE list_contains(parents, '{value}'))")
        elif option in ("--step", "--rank"):
            clauses.append(f"{option[2:]} = {value}")
        else:
            clauses.append(f"{option[2:]} = '{value}'")
    return " AND ".join(clauses)


# -- every command takes them ---------------------------------------------------------------


def test_every_command_that_reads_a_trace_lists_the_filters_and_formats():
    for name, formats in TRACE_COMMANDS.items():
        shown = spiketrace(name, "-h").stdout
        assert all(option in shown for option in FILTERS), (name, shown)
        if formats:
            listed = re.search(r"--format \[([a-z|]+)\]", shown)
            assert listed and tuple(listed[1].split("|")) == formats, (name, shown)
    integrity = spiketrace("validate", "-h").stdout  # a trace's integrity is the whole trace's
    assert not any(re.search(rf"^\s+{option}\b", integrity, re.MULTILINE) for option in FILTERS)
    assert "takes no --stage" in integrity
    assert "--format [table|json]" in integrity


def test_every_option_has_help_and_every_command_an_example():
    context = click.Context(main)

    def commands(group, prefix=""):
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if isinstance(command, click.Group):
                yield from commands(command, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", command

    listed = dict(commands(main))
    assert set(COMMANDS) <= {name.split()[0] for name in listed}
    for name, command in listed.items():
        assert "Example: spiketrace " in (command.help or ""), name
        assert [p.name for p in command.params if isinstance(p, click.Option) and not p.help] == [], name


def test_a_value_the_trace_does_not_hold_is_bad_input_naming_the_values_it_holds(trace):
    for command in (["counts"], ["energy"], ["info"], ["sql", trace, "SELECT 1"]):
        args = command if len(command) > 1 else [*command, trace]
        refused = spiketrace(*args, "--phase", "bwd", code=2)
        assert refused.stdout == "" and refused.stderr.count("\n") == 1
        assert "--phase bwd" in refused.stderr and "backward, forward, optimizer" in refused.stderr
    assert "the trace has 0, 1" in spiketrace("collectives", trace, "--rank", "5", code=2).stderr
    assert "No such option" in spiketrace("validate", trace, "--stage", "forward", code=2).stderr


# -- the numbers they select ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_info_and_sql_see_the_selected_rows(trace, name):
    selection = SELECTIONS[name]
    expected = dict(raw(trace, f"SELECT op, count(*) FROM events WHERE {where(selection)} GROUP BY op"))
    info = json.loads(spiketrace("info", trace, *selection, "--format", "json").stdout)
    assert {row["op"]: row["count"] for row in info["ops"]} == expected
    assert info["trace"]["counts"]["events"] == sum(expected.values())
    assert info["selection"] == {k[2:]: (int(v) if k in ("--step", "--rank") else v)
                                 for k, v in zip(selection[::2], selection[1::2])}
    query = "SELECT count(*) AS n, count(DISTINCT rank) AS ranks FROM events"
    rows = json.loads(spiketrace("sql", trace, query, *selection, "--format", "json").stdout)
    assert rows[0]["n"] == sum(expected.values())
    # the views over events (stage_summary here) see the selection too
    summary = pd.read_csv(__import__("io").StringIO(spiketrace(
        "sql", trace, "SELECT sum(ops) AS ops FROM stage_summary", *selection, "--format", "csv").stdout))
    assert int(summary["ops"].iloc[0]) == sum(expected.values())


def test_info_stages_of_a_phase_are_the_markers_of_that_phase(trace):
    expected = raw(trace, "SELECT rank, stage_id, name FROM stage_markers WHERE kind = 'begin' AND phase = 'forward' "
                          "AND step = 1 ORDER BY rank, seq")
    info = json.loads(spiketrace("info", trace, "--phase", "forward", "--step", "1", "--format", "json").stdout)
    assert [(s["rank"], s["stage_id"], s["name"]) for s in info["stages"]] == [tuple(r) for r in expected]
    assert {name for *_, name in expected} == {"forward", "eval"}


@pytest.fixture(scope="module")
def one_per_mul(tmp_path_factory) -> Path:
    rules = tmp_path_factory.mktemp("rules") / "calls.toml"
    rules.write_text(f'[flop]\n"{MUL}" = "1"\n')  # each call of aten.mul.Tensor counts 1: its flop are its calls
    return rules


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_counts_filter_the_events_they_count(trace, one_per_mul, name):
    selection = SELECTIONS[name]
    calls = raw(trace, f"SELECT count(*) FROM events WHERE op = '{MUL}' AND {where(selection)}")[0][0]
    assert calls > 0
    document = json.loads(spiketrace("counts", trace, "--rules", one_per_mul, "--counter", "flop", "--ops", MUL,
                                     *selection, "--format", "json").stdout)
    assert document["counters"]["flop"]["total"] == calls
    assert document["selection"]


def test_counts_of_several_traces_filter_each(trace, one_per_mul, tmp_path):
    copy = shutil.copytree(trace, tmp_path / "copy")
    calls = raw(trace, f"SELECT count(*) FROM events WHERE op = '{MUL}' AND phase = 'backward' AND rank = 1")[0][0]
    document = json.loads(spiketrace("counts", trace, copy, "--rules", one_per_mul, "--counter", "flop", "--ops", MUL,
                                     "--phase", "backward", "--rank", "1", "--format", "json").stdout)
    assert document["counters"]["flop"]["total"] == 2 * calls


@pytest.fixture(scope="module")
def whole(trace) -> dict:
    """The unfiltered report: its energy by stage, step and rank."""
    return json.loads(spiketrace("energy", trace, "--format", "json").stdout)


def forward_stages(trace) -> list[str]:
    return [name for (name,) in raw(trace, "SELECT DISTINCT name FROM stage_markers WHERE phase = 'forward' ORDER BY 1")]


@pytest.mark.parametrize("name", ["stage", "phase", "step", "rank"])
def test_energy_selects_stages_steps_and_ranks(trace, whole, name):
    selection = SELECTIONS[name]
    expected = {
        "stage": whole["energy_by_stage"]["backward"],
        "phase": sum(whole["energy_by_stage"][s] for s in forward_stages(trace)),
        "step": whole["energy_by_step"]["1"],
        "rank": whole["energy_by_rank"]["1"],
    }[name]
    document = json.loads(spiketrace("energy", trace, *selection, "--format", "json").stdout)
    assert document["energy_total_pj"] == pytest.approx(expected, rel=1e-9)
    assert 0 < expected < whole["energy_total_pj"]


def test_energy_refuses_a_module_and_a_phase_its_stage_is_not_of(trace):
    for command in (["energy", trace], ["report", trace, "--out", "r.html"], ["diff", trace, trace],
                    ["recost", trace, "--out", "r.csv"], ["plot", trace, "energy", "--out", "e.png"]):
        refused = spiketrace(*command, "--module", "Sequential.0", code=2)
        assert refused.stderr.startswith("error: --module Sequential.0") and "--by module" in refused.stderr
    mixed = spiketrace("energy", trace, "--phase", "backward", "--stage", "forward", code=2)
    assert "not of --phase backward" in mixed.stderr


def test_recost_diff_and_report_cost_the_selection(trace, whole, tmp_path):
    backward = whole["energy_by_stage"]["backward"]
    spiketrace("recost", trace, "--phase", "backward", "--out", tmp_path / "r.csv")
    frame = pd.read_csv(tmp_path / "r.csv")
    assert frame.loc[frame["key"] == "energy_total_pj", "pj"].item() == pytest.approx(backward, rel=1e-9)

    compared = json.loads(spiketrace("diff", trace, trace, "--step", "1", "--format", "json").stdout)
    metrics = {(m["metric"], m["scope"]): m for m in compared["metrics"]}
    assert metrics[("energy.total", "Global")]["a"] == pytest.approx(whole["energy_by_step"]["1"], rel=1e-9)
    assert metrics[("events", "Global")]["a"] == raw(trace, "SELECT count(*) FROM events WHERE step = 1")[0][0]
    assert compared["selection"] == {"step": 1}

    spiketrace("report", trace, "--stage", "backward", "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "(stage backward)</title>" in page and format_energy(backward) in page
    events = raw(trace, "SELECT count(*) FROM events WHERE stage = 'backward'")[0][0]
    assert f"{events} events" in page


def test_plots_take_the_filters_where_they_read_the_trace(trace, tmp_path):
    spiketrace("plot", trace, "spikes", "--module", "Sequential.2", "--out", tmp_path / "s.png")
    spiketrace("plot", trace, "stages", "--phase", "forward", "--out", tmp_path / "f.png")
    spiketrace("recost", trace, "--model", "compute", "--sweep", "e_mac_pj=0.5:1:2", "--out", tmp_path / "sweep.csv")
    refused = spiketrace("plot", trace, "sweep", "--recost", tmp_path / "sweep.csv", "--x", "e_mac_pj", "--rank", "0",
                         "--out", tmp_path / "w.png", code=2)
    assert "spiketrace recost" in refused.stderr
