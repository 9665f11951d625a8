"""The engine never changes what a command prints: `counts`, `energy` and `recost` under
`--engine dask` (here on a LocalCluster of two worker processes, through --scheduler) print
what the in-process engine prints, in every --format, for one single-rank trace, one
multi-rank trace and several traces. The output's shape follows what was asked (one trace or
several), never the engine.

Numbers are compared as parsed: integers equal, floats to 1e-9 relative (a sum over a
trace's ranks may add in another order than the whole trace's). Text is compared line by
line, each number in it as a float.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from click.testing import CliRunner

from spiketrace.analyze.cli import main
from tests.training_runs import record, record_ranks

distributed = pytest.importorskip("distributed")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

REL = 1e-9


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine_output")
    single = str(record(root / "single_rank", 2))
    multi = str(record_ranks(root / "multi_rank", 2, ranks=2))
    return {"single-rank": [single], "multi-rank": [multi], "several": [single, multi]}


@pytest.fixture(scope="module")
def scheduler():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client.scheduler.address


def close(a, b) -> bool:
    """a equals b, floats to REL relative (ints compared as numbers too: 3 == 3.0 is not a shape change)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def text_close(a: str, b: str) -> bool:
    """Line by line the same words, the numbers in them equal to REL."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    if len(lines_a) != len(lines_b):
        return False
    for x, y in zip(lines_a, lines_b):
        if NUMBER.sub("#", x) != NUMBER.sub("#", y):
            return False
        numbers = [(float(p.replace(",", "")), float(q.replace(",", "")))
                   for p, q in zip(NUMBER.findall(x), NUMBER.findall(y))]
        if not all(math.isclose(p, q, rel_tol=REL, abs_tol=1e-12) for p, q in numbers):
            return False
    return True


def csv_rows(text: str) -> list[list]:
    import csv
    import io

    def value(cell: str):
        try:
            return int(cell)
        except ValueError:
            try:
                return float(cell)
            except ValueError:
                return cell

    return [[value(cell) for cell in row] for row in csv.reader(io.StringIO(text))]


def same(output_format: str, here: str, there: str) -> bool:
    if output_format == "json":
        return close(json.loads(there), json.loads(here))
    if output_format == "csv":
        return close(csv_rows(there), csv_rows(here))
    return text_close(there, here)


def invoke(arguments: list[str]):
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 0, (arguments, result.output)
    return result.stdout


COMMANDS = {
    "counts": ["counts"],
    "counts by op": ["counts", "--by", "op", "--counter", "mac,ac,flop"],
    "counts by stage, forward": ["counts", "--by", "stage", "--phase", "forward"],
    "counts neurobench": ["counts", "--convention", "neurobench", "--counter", "synop,mac"],
    "counts by trace": ["counts", "--by", "trace"],
    "energy": ["energy"],  # the traces' default model: neuromc for training
    "energy neuromc forward": ["energy", "--model", "neuromc", "--phase", "forward"],
    "energy compute by stage": ["energy", "--model", "compute", "--by", "stage"],
    "energy lemaire": ["energy", "--model", "lemaire"],  # evaluated whole trace by whole trace
    "energy by trace": ["energy", "--model", "compute", "--by", "trace"],
}


# Every command as JSON (the whole document); table and csv, which format the same results,
# for one command of each kind.
CASES = [(command, "json") for command in COMMANDS] + [
    (command, output_format) for command in ("counts by op", "energy", "energy compute by stage", "counts by trace")
    for output_format in ("table", "csv")]


@pytest.mark.parametrize("count", ["single-rank", "multi-rank", "several"])
@pytest.mark.parametrize(("command", "output_format"), CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_the_dask_engine_prints_what_the_in_process_engine_prints(traces, scheduler, command, output_format, count):
    arguments = [*COMMANDS[command], *traces[count], "--format", output_format]
    here = invoke(arguments)
    there = invoke([*arguments, "--engine", "dask", "--scheduler", scheduler])
    assert same(output_format, here, there), f"{command} --format {output_format} on {count}:\n{here}\n---\n{there}"


@pytest.mark.parametrize("count", ["single-rank", "multi-rank", "several"])
def test_recost_writes_the_same_rows_under_either_engine(traces, scheduler, count, tmp_path):
    arguments = ["recost", *traces[count], "--preset", "neuromc-like-v1", "--sweep", "mac_cost_pj.wg=0.5:1.0:2"]
    invoke([*arguments, "--out", str(tmp_path / "here.csv")])
    invoke([*arguments, "--out", str(tmp_path / "there.csv"), "--scheduler", scheduler])
    assert close(csv_rows((tmp_path / "there.csv").read_text()), csv_rows((tmp_path / "here.csv").read_text()))
