"""Every energy model's queries, and the named views, grow linearly with the trace.

A small spiking net is trained for N and 4N steps on two ranks (tests/training_runs.py).
Each model maps both traces on a connection with DuckDB's profiler on, so every statement
it runs leaves its operator tree with the rows each operator produced (what EXPLAIN
ANALYZE prints). From that tree, per statement:

* its output: the most rows any operator produced;
* its pairs: for the joins that compare rows pair by pair instead of looking them up by
  key, the most pairs one compares (the product of its inputs' rows). Such a join is a
  nested-loop, blockwise or piecewise-merge join, a cross product, or a hash join whose keys
  are only `rank` (and `module_id`) with a `<`/`>` condition on top: `e.rank = r.rank AND
  e.seq > r.start_seq` compares every pair of a rank's records. Its output can be small
  while its work grows with the square of the trace, so output rows alone would not show it;
* its input: the most rows any leaf (table, view or file scan) produced.

Asserted: each statement's output stays within 4x its input, and from N to 4N steps both its
output and its pairs grow about linearly (at most 6x; a join on rank alone grows 16x). Row
counts, never timings: the test cannot flake on a busy machine. (An analysis joining the
events on rank alone fails it.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spiketrace.analyze import open_trace
from spiketrace.analyze.energy import map_activity
from spiketrace.analyze.trace.views import sql_views
from tests.training_runs import record_ranks

STEPS = 4  # the small trace; the big one has 4x the steps
GROWTH_LIMIT = 6.0  # 4x the steps: linear is ~4x, a join on rank alone 16x
OUTPUT_LIMIT = 4.0  # an operator's rows against the statement's largest input
CHECKED_FROM = 100  # intermediates below this many rows at 4N steps are too small to judge
PAIRWISE = {"NESTED_LOOP_JOIN", "BLOCKWISE_NL_JOIN", "CROSS_PRODUCT", "PIECEWISE_MERGE_JOIN"}
WEAK_KEYS = {"rank", "module_id"}  # equal on too many rows to pin a match

MAPPINGS = {
    "compute": ("compute", {}),
    "compute compat": ("compute", {"compat": "spikingjelly"}),
    "neuromc": ("neuromc", {}),
    "neuromc compat": ("neuromc", {"compat": "spikingjelly"}),
    "lemaire": ("lemaire", {}),
    "spikesim": ("spikesim", {}),
}


def _conditions(node: dict) -> list[str]:
    conditions = node.get("extra_info", {}).get("Conditions", [])
    return [conditions] if isinstance(conditions, str) else list(conditions)


def _compares_pairs(node: dict) -> bool:
    """Does this join compare its inputs' rows pair by pair (see the module docstring)?"""
    if node["name"] in PAIRWISE:
        return True
    if node["name"] != "HASH_JOIN":
        return False
    conditions = _conditions(node)
    weak = [c for c in conditions if re.fullmatch(r"(\w+) (=|IS NOT DISTINCT FROM) (\w+)", c)
            and set(re.findall(r"\w+", c)) - {"IS", "NOT", "DISTINCT", "FROM"} <= WEAK_KEYS]
    pinned = [c for c in conditions if c not in weak and re.search(r" = | IS NOT DISTINCT FROM ", c)]
    ranges = any(re.search(r"[<>]", c) for c in conditions)
    return not pinned and (ranges or (bool(weak) and all(c == "rank = rank" for c in weak)))


def _nodes(nodes):
    for node in nodes:
        yield node
        yield from _nodes(node.get("children", []))


def _rows(node: dict) -> int:
    """Rows a node hands its parent: the profiler counts none for a UNION (it passes its
    inputs' through) or a CTE (it passes its last child's)."""
    if node["name"] == "UNION":
        return sum(_rows(child) for child in node["children"])
    if node["name"] == "CTE":
        return _rows(node["children"][-1])
    return node.get("intermediate_rows", 0)


def measure(profile: dict, sql: str) -> dict:
    """The numbers the test asserts on, from one statement's profile."""
    nodes = list(_nodes(profile["operator"]))
    rows = [n.get("intermediate_rows", 0) for n in nodes]
    leaves = [n.get("intermediate_rows", 0) for n in nodes if not n.get("children")]
    pairs = [_rows(n["children"][0]) * _rows(n["children"][1])
             for n in nodes if len(n.get("children", [])) == 2 and _compares_pairs(n)]
    largest = max(nodes, key=lambda n: n.get("intermediate_rows", 0))
    pairwise = [f"{n['name']} {_conditions(n)}" for n in nodes if len(n.get("children", [])) == 2 and _compares_pairs(n)]
    return {"sql": " ".join(sql.split()), "output": max(rows, default=0), "input": max(leaves, default=0),
            "pairs": max(pairs, default=0), "where": f"{largest['name']} {_conditions(largest)}",
            "pairwise": "; ".join(pairwise)}


class ProfiledConnection:
    """Stands in for trace.con: runs each statement with DuckDB's profiler on and keeps its
    measure(). Cursors (the counters' reader thread) pass through unprofiled."""

    def __init__(self, con, output: Path) -> None:
        self.con, self.output, self.measured, self.query = con, output, [], ""
        con.execute(f"PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{output}'")

    def _keep(self) -> None:
        if self.output.exists():
            self.measured.append(measure(json.loads(self.output.read_text()), self.query))
            self.output.unlink()

    def execute(self, query, params=None):
        self.query = query
        self.con.execute(query, params)
        if not query.lstrip().upper().startswith(("SELECT", "WITH")):
            self._keep()  # a result-less statement has run to its end
        return self

    def _fetched(self, method):
        result = getattr(self.con, method)()
        self._keep()
        return result

    def df(self):
        return self._fetched("df")

    def fetchall(self):
        return self._fetched("fetchall")

    def fetchone(self):
        return self._fetched("fetchone")

    def sql(self, query, **options):
        relation, connection = self.con.sql(query, **options), self

        class Relation:
            def to_arrow_table(self):
                connection.query = query
                return connection._fetched_relation(relation)

            def __getattr__(self, name):
                return getattr(relation, name)

        return Relation()

    def _fetched_relation(self, relation):
        table = relation.to_arrow_table()
        self._keep()
        return table

    def cursor(self):
        return self.con.cursor()

    def __getattr__(self, name):
        return getattr(self.con, name)


def profiled(path, run, tmp_path) -> list[dict]:
    with open_trace(path) as trace:
        trace.con = ProfiledConnection(trace.con, tmp_path / "profile.json")
        run(trace)
        measured = trace.con.measured
        trace.con = trace.con.con
    return measured


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaling")
    return {steps: record_ranks(root / f"steps{steps}", steps) for steps in (STEPS, 4 * STEPS)}


def _key(sql: str) -> str:
    """Statements of one code path at any trace size (chunk bounds and the like differ)."""
    return re.sub(r"\d+", "#", sql)


def _by_key(measured: list[dict]) -> dict[str, dict]:
    """Per code path, its largest output and its largest pair count (each over its runs)."""
    keyed: dict[str, dict] = {}
    for m in measured:
        kept = keyed.setdefault(_key(m["sql"]), dict(m))
        for measure_name in ("output", "pairs"):
            kept[measure_name] = max(kept[measure_name], m[measure_name])
    return keyed


def check_linear(small: list[dict], big: list[dict]) -> None:
    assert big, "no statement was profiled"
    for m in big:
        assert m["output"] <= OUTPUT_LIMIT * max(m["input"], CHECKED_FROM), (
            f"{m['where']} made {m['output']} rows from inputs of at most {m['input']}: {m['sql'][:300]}")
    check_growth(small, big)


def check_growth(small: list[dict], big: list[dict]) -> None:
    """The largest operator output and the most pairs a join compares, per statement, grow
    at most GROWTH_LIMIT times from the small trace to the big one. Both are needed: a
    quadratic join can stay below a linear table scan until the trace is large."""
    before = _by_key(small)
    for key, m in _by_key(big).items():
        if key not in before:
            continue
        for measure_name, where in (("output", m["where"]), ("pairs", m["pairwise"])):
            if m[measure_name] < CHECKED_FROM:
                continue
            growth = m[measure_name] / max(before[key][measure_name], 1)
            assert growth <= GROWTH_LIMIT, (
                f"4x the steps made {growth:.1f}x the {measure_name} ({before[key][measure_name]} -> "
                f"{m[measure_name]}, {where}): {m['sql'][:300]}")


@pytest.mark.parametrize("name", list(MAPPINGS))
def test_energy_model_queries_grow_linearly_with_steps(traces, tmp_path, name):
    model, options = MAPPINGS[name]

    def run(trace):
        map_activity(trace, model, **options)

    small, big = (profiled(traces[steps], run, tmp_path) for steps in (STEPS, 4 * STEPS))
    check_linear(small, big)


def test_named_views_grow_linearly_with_steps(traces, tmp_path):
    def run(trace):
        for name in sql_views():
            trace.con.execute(f"SELECT * FROM {name}").fetchall()

    small, big = (profiled(traces[steps], run, tmp_path) for steps in (STEPS, 4 * STEPS))
    assert len(big) == len(sql_views())
    check_linear(small, big)


# The checker itself: a join on rank alone with a range on top is caught.
QUADRATIC = """SELECT count(*) FROM events e JOIN module_events m
               ON m.rank = e.rank AND e.seq > m.seq AND e.seq < m.seq + 1000000"""


def test_the_check_catches_a_join_on_rank_alone(traces, tmp_path):
    def run(trace):
        trace.con.execute(QUADRATIC).fetchall()

    small, big = (profiled(traces[steps], run, tmp_path) for steps in (STEPS, 4 * STEPS))
    # the join compares every event with every module event of its rank: 4x the steps give
    # 4x the events and 4x the module events, 16x the pairs; most pairs match (a 1M-seq
    # window), so its output is far beyond its inputs too
    with pytest.raises(AssertionError, match=r"4x the steps made 1[5-7]\.\dx the (output|pairs)"):
        check_growth(small, big)
    with pytest.raises(AssertionError, match="HASH_JOIN .*rank = rank.* made"):
        check_linear(small, big)
