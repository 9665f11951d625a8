"""The spiketrace command line: output of info/sql/validate, exit codes and one-line errors."""

import collections
import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.analyze.trace import TraceError
from spiketrace.capture.store.writer import TraceWriter
from spiketrace.schemas import layout
from spiketrace.schemas.version import SCHEMA_VERSION
from tests.test_trace_reader import OPS, STAGES, TENSORS, fill, part, write_trace

REPO = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


@pytest.fixture
def trace_dir(tmp_path):
    return write_trace(tmp_path / "trace")


def test_info_table_shows_manifest_counts_ops_and_stages(trace_dir):
    result = run("info", trace_dir)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.split() == ["status", "complete"] for line in lines)
    assert any(line.split() == ["schema_version", SCHEMA_VERSION] for line in lines)
    assert any(line.split() == ["events", str(len(OPS))] for line in lines)
    assert any(line.split() == ["ops", str(len(set(OPS)))] for line in lines)
    for op, count in collections.Counter(OPS).items():
        assert any(line.split() == [op, str(count)] for line in lines)
    for _, name, phase, *_ in STAGES:
        assert any(name in line and phase in line for line in lines)


def test_info_json_is_the_summary_ops_and_stages(trace_dir):
    result = run("info", trace_dir, "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["trace"]["status"] == "complete" and document["trace"]["complete"] is True
    assert document["trace"]["ranks"] == [0] and document["trace"]["metadata"] == {"run": "test"}
    assert document["trace"]["counts"]["events"] == len(OPS)
    assert document["trace"]["counts"]["stages"] == len(STAGES)
    assert {row["op"]: row["count"] for row in document["ops"]} == dict(collections.Counter(OPS))
    counts = [row["count"] for row in document["ops"]]
    assert counts == sorted(counts, reverse=True)
    assert [(s["stage_id"], s["name"], s["begin_seq"], s["end_seq"]) for s in document["stages"]] == [
        (stage_id, name, begin, end) for stage_id, name, _, begin, end in STAGES
    ]


def test_sql_formats(trace_dir):
    query = "SELECT seq, op FROM events ORDER BY seq"
    expected = [{"seq": seq, "op": op} for seq, op in enumerate(OPS, start=1)]
    as_json = run("sql", trace_dir, query, "--format", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == expected
    as_csv = run("sql", trace_dir, query, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [{"seq": int(r["seq"]), "op": r["op"]} for r in rows] == expected
    as_table = run("sql", trace_dir, query)
    assert [line.split() for line in as_table.stdout.splitlines()] == [["seq", "op"]] + [
        [str(row["seq"]), row["op"]] for row in expected
    ]


def test_sql_json_keeps_lists_and_nulls(trace_dir):
    result = run("sql", trace_dir, "SELECT tensor_id, shape, freed_seq FROM tensors ORDER BY tensor_id", "--format", "json")
    assert [row["tensor_id"] for row in json.loads(result.stdout)] == list(TENSORS)
    assert all(row["shape"] == [2, 3] for row in json.loads(result.stdout))
    assert [row["freed_seq"] for row in json.loads(result.stdout)] == [4, None, None]


def test_validate_ok(trace_dir):
    result = run("validate", trace_dir)
    assert result.exit_code == 0
    assert result.stdout.startswith("OK") and f"{len(OPS)} events" in result.stdout


def test_validate_problems_exit_1(tmp_path):
    writer = TraceWriter(tmp_path / "t")
    fill(writer)
    writer.tables["event_tensors"].append(seq=2, k=0, role="arg", position=0, name=None, item=None, tensor_id=999)
    writer.close()
    result = run("validate", tmp_path / "t")
    assert result.exit_code == 1
    assert "event_tensors.tensor_id" in result.stdout and "999" in result.stdout and "OK" not in result.stdout


def test_errors_are_one_line_with_exit_2(trace_dir, tmp_path):
    bad_sql = run("sql", trace_dir, "SELECT * FROM no_such_view")
    assert bad_sql.exit_code == 2 and bad_sql.stdout == ""
    assert bad_sql.stderr.startswith("error: ") and bad_sql.stderr.count("\n") == 1 and "no_such_view" in bad_sql.stderr
    missing = run("info", tmp_path / "nowhere")
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1 and "nowhere" in missing.stderr
    part(trace_dir, "events").write_bytes(b"garbage")
    damaged = run("validate", trace_dir)
    assert damaged.exit_code == 2 and damaged.stderr.count("\n") == 1
    assert str(part(trace_dir, "events")) in damaged.stderr and "Traceback" not in damaged.output


def test_debug_shows_the_exception(trace_dir):
    part(trace_dir, "events").write_bytes(b"garbage")
    result = CliRunner().invoke(main, ["--debug", "info", str(trace_dir)])
    assert isinstance(result.exception, TraceError) and result.exit_code != 2


def test_crashed_trace_warns(tmp_path):
    write_trace(tmp_path / "t", close=False)
    info = run("info", tmp_path / "t")
    assert info.exit_code == 0 and any(line.split() == ["status", "running"] for line in info.stdout.splitlines())
    assert "warning:" in info.stdout
    query = run("sql", tmp_path / "t", "SELECT count(*) AS n FROM events", "--format", "json")
    assert query.exit_code == 0 and json.loads(query.stdout) == [{"n": len(OPS)}] and "warning:" in query.stderr


def test_real_subprocess_exit_codes_and_one_line_error(trace_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "spiketrace.analyze.cli", *map(str, args)],
                              capture_output=True, text=True, env=env)

    ok = cli("validate", trace_dir)
    assert ok.returncode == 0 and ok.stdout.startswith("OK")
    manifest = trace_dir / layout.MANIFEST_NAME
    manifest.write_text(manifest.read_text().replace(f'"schema_version": "{SCHEMA_VERSION}"', '"schema_version": "9.0"'))
    refused = cli("info", trace_dir)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1
    assert "9.0" in refused.stderr and SCHEMA_VERSION in refused.stderr and str(manifest) in refused.stderr
    debug = cli("--debug", "info", trace_dir)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


@pytest.mark.skipif(importlib.util.find_spec("spiketrace.capture.session.example") is None,
                    reason="capture/session/example.py not written yet")
def test_demo_records_and_summarises(tmp_path):
    result = run("demo", tmp_path / "demo", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["trace"]["complete"] is True and document["trace"]["counts"]["events"] > 0
    assert sum(row["count"] for row in document["ops"]) == document["trace"]["counts"]["events"]
    assert run("validate", tmp_path / "demo").exit_code == 0


def test_unexpected_errors_are_one_line_unless_debug(tmp_path):
    import torch
    from torch import nn

    from spiketrace.capture import Recorder

    model = nn.Linear(3, 2)  # no spiking layer: nothing to draw a spike heatmap of
    with Recorder(tmp_path / "trace", model=model):
        model(torch.rand(2, 3))
    runner = CliRunner()
    plain = runner.invoke(main, ["plot", str(tmp_path / "trace"), "spikes", "--out", str(tmp_path / "a.png")])
    assert plain.exit_code == 2
    assert plain.output.count("\n") == 1 and "no binary module outputs" in plain.output and "--debug" in plain.output
    debug = runner.invoke(main, ["--debug", "plot", str(tmp_path / "trace"), "spikes", "--out", str(tmp_path / "a.png")])
    assert isinstance(debug.exception, ValueError)


def test_help_is_fast_to_load_and_matches_the_commands():
    import subprocess
    import sys

    from spiketrace.analyze.cli.app import COMMANDS, MODEL_NAMES
    from spiketrace.analyze.energy import MODELS

    assert set(MODEL_NAMES) == set(MODELS)
    # `spiketrace --help` imports no command module, so none of pandas, DuckDB, pyarrow
    code = ("import sys; from spiketrace.analyze.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('pandas', 'duckdb', 'pyarrow', 'numpy') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name, (_module, short) in COMMANDS.items():  # the listed line is the command's own
        command = main.get_command(None, name)
        assert command is not None and command.help.splitlines()[0] == short, name


def test_version_and_short_help_flag():
    from importlib.metadata import version

    runner = CliRunner()
    assert runner.invoke(main, ["--version"]).output.strip() == f"spiketrace, version {version('spiketrace')}"
    assert runner.invoke(main, ["energy", "-h"]).output.startswith("Usage: ")
    assert "Example:" in runner.invoke(main, ["counts", "-h"]).output
