"""What the commands print, whatever a trace holds: terminal text without control
characters from the data, JSON without NaN or Infinity, and `spiketrace sql` spilling into a
capped temp folder of its own that is gone afterwards."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from spiketrace.analyze.present.energy_table import energy_text
from spiketrace.analyze.present.safe_text import NonFiniteError, json_text, safe, safe_line
from tests.test_trace_reader import OPS, write_trace

REPO = Path(__file__).resolve().parents[2]
EVIL = "aten.add\x1b[2J\x1b]0;owned\x07.Tensor\r\u202e\x9b31m"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def run(*args):
    return CliRunner().invoke(main, [str(arg) for arg in args])


@pytest.fixture
def evil_trace(tmp_path):
    return write_trace(tmp_path / "trace", ops=[*OPS, EVIL])


# -- safe(): terminal text ------------------------------------------------------------------------

def test_safe_shows_control_characters_as_escapes_and_keeps_lines():
    assert safe("a\x1b[31mb") == "a\\x1b[31mb"
    assert safe("bell\x07 csi\x9b del\x7f cr\r nul\x00") == "bell\\x07 csi\\x9b del\\x7f cr\\x0d nul\\x00"
    assert safe("right\u202eleft \u2066iso\u2069") == "right\\u202eleft \\u2066iso\\u2069"
    assert safe("two\nlines\tand a tab, ünïcödé µJ") == "two\nlines\tand a tab, ünïcödé µJ"
    assert safe_line("two\nlines\t") == "two\\nlines\\t"
    assert safe(safe(EVIL)) == safe(EVIL) and not CONTROL.search(safe(EVIL))
    assert safe(3.5) == "3.5"


def test_tables_show_trace_strings_safe_and_json_keeps_them_exact(evil_trace):
    for args in (["info", evil_trace], ["sql", evil_trace, "SELECT op FROM events"],
                 ["counts", evil_trace, "--by", "op"]):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert not CONTROL.search(result.output), args
        assert safe_line(EVIL) in result.output, args
    rows = json.loads(run("sql", evil_trace, "SELECT op FROM events", "--format", "json").stdout)
    assert EVIL in {row["op"] for row in rows}  # JSON escapes, and keeps the exact string
    document = json.loads(run("info", evil_trace, "--format", "json").stdout)
    assert EVIL in {row["op"] for row in document["ops"]}


def test_energy_and_error_text_is_safe():
    frame = pd.DataFrame({"breakdown": ["total", "module", "module"], "key": ["energy_total_pj", "Net", f"Net.{EVIL}"],
                          "pj": [3.0, 3.0, 1.0], "count": [None, None, None]})
    lines = energy_text(frame, "module", "compute", {f"Net.{EVIL}": "Evil\x1b[0m"})
    assert not any(CONTROL.search(line) for line in lines)
    assert any(safe_line(f"Net.{EVIL}") in line and "Evil\\x1b[0m" in line for line in lines)
    result = run("presets", "show", f"nope{EVIL}")
    assert result.exit_code == 2 and not CONTROL.search(result.output) and result.output.startswith("error: ")


# -- json_text(): no NaN or Infinity ----------------------------------------------------------------

@pytest.mark.parametrize("document, where", [
    ({"energy_total_pj": math.inf}, "energy_total_pj"),
    ({"breakdown_pj": {"mac_pj": 1.0, "ac_pj": math.nan}}, "breakdown_pj.ac_pj"),
    ([{"x": 1}, {"x": -math.inf}], "[1].x"),
    ({"stats": {"forward": [0.5, np.float32("nan")]}}, "stats.forward[1]"),
    ({"a": {"b\x1b": math.nan}}, "a.b\\x1b"),
])
def test_json_refuses_non_finite_numbers_naming_the_key(document, where):
    with pytest.raises(NonFiniteError) as raised:
        json_text(document, indent=1)
    assert f"JSON output: {where} is " in str(raised.value) and "\n" not in str(raised.value)


def test_json_of_finite_documents_is_what_json_dumps_writes():
    document = {"pj": 1.5, "n": np.int64(3), "none": None, "text": "a\x1bb", "nested": [{"r": 0.1}]}
    assert json_text(document, indent=2, default=str) == json.dumps(document, indent=2, default=str)
    assert json.loads(json_text({"x": None}))["x"] is None  # "not applicable" is null before it gets here


def test_every_json_output_of_the_cli_goes_through_json_text():
    for path in sorted((REPO / "analyze" / "cli").glob("*.py")):
        text = path.read_text()
        assert not re.search(r"echo\(\s*json\.dumps|text = json\.dumps", text), path.name


def test_a_non_finite_value_in_json_output_is_a_one_line_error_exit_2(evil_trace):
    result = run("sql", evil_trace, "SELECT 1 AS ok, 'nan'::DOUBLE AS x", "--format", "json")
    assert result.exit_code == 2
    assert result.output.strip() == ("error: JSON output: [0].x is nan, not a finite number (JSON has no NaN or "
                                     "Infinity); use --format csv, or isnan() in the query")
    assert run("sql", evil_trace, "SELECT 'nan'::DOUBLE AS x", "--format", "csv").exit_code == 0
    energy = run("energy", evil_trace, "--model", "compute", "--set", "e_mac_pj=1e308", "--format", "json")
    assert energy.exit_code == 2 and "e_mac_pj = 1e+308 pJ: above the maximum" in energy.output
    assert "Infinity" not in energy.output and "NaN" not in energy.output


# -- spiketrace sql: a capped temp folder of its own -------------------------------------------------

def _folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("spiketrace-sql-*")}


def test_sql_spills_into_a_capped_folder_of_its_own_removed_on_exit(evil_trace):
    before = _folders()
    result = run("sql", evil_trace, "SELECT current_setting('temp_directory') AS folder, "
                 "current_setting('max_temp_directory_size') AS cap", "--format", "json", "--max-temp-size", "300MB")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)[0]
    folder = Path(row["folder"])
    assert folder.parent == Path(tempfile.gettempdir()) and folder.name.startswith(f"spiketrace-sql-{os.getpid()}-")
    assert row["cap"] in ("286.1 MiB", "300.0 MB")  # DuckDB shows the cap in its own units
    assert not folder.exists() and _folders() <= before
    default = run("sql", evil_trace, "SELECT current_setting('max_temp_directory_size') AS cap", "--format", "csv")
    assert default.stdout.splitlines()[1] in ("1.8 GiB", "1.9 GiB", "2.0 GB")  # 2GB by default


def test_a_query_that_would_spill_past_the_cap_fails_in_one_line(evil_trace):
    query = ("SET memory_limit = '32MB'; SET threads = 1; SELECT count(*) FROM (SELECT md5(i::VARCHAR) || "
             "md5((i + 1)::VARCHAR) AS s FROM range(3000000) t(i) ORDER BY s)")
    before = _folders()
    result = run("sql", evil_trace, query, "--max-temp-size", "16MB")
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "max_temp_directory_size" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert _folders() <= before
    assert run("sql", evil_trace, "SELECT 1", "--max-temp-size", "lots").exit_code == 2


def test_sql_removes_the_folder_a_killed_run_left_behind(evil_trace):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = Path(tempfile.mkdtemp(prefix=f"spiketrace-sql-{int(dead.stdout)}-"))
    (left / "duckdb_temp_block").write_bytes(b"x" * 1024)
    alive = Path(tempfile.mkdtemp(prefix=f"spiketrace-sql-{os.getppid()}-"))  # a running process's: kept
    try:
        assert run("sql", evil_trace, "SELECT 1").exit_code == 0
        assert not left.exists() and alive.exists()
    finally:
        for folder in (left, alive):
            if folder.exists():
                for child in folder.iterdir():
                    child.unlink()
                folder.rmdir()
