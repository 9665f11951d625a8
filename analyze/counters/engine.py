"""Evaluate counter rule tables over a trace, all events at once, in DuckDB.

Per event, a counter's value is `CASE op WHEN <op> THEN <rule> ... END` over op_facts; NULL
means no rule covers the op. Attribution follows SpikingJelly: an event's value goes to
every scope name in the tracker's `parents` at that op, "Global" included, and an op a rule
covers is recorded even when its value is 0. An event is skipped (neither counted nor
unsupported) when an ignored module is active: by default only modules really running
(their scope name is in `parents`); under compat="spikingjelly" also those its tracker left
active after backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import pandas as pd

from analyze.counters.gather import build_op_facts
from analyze.counters.sql import MACROS

COMPAT_MODES = (None, "spikingjelly")


class StrictModeError(RuntimeError):
    """strict=True and some op no rule covers was met (or SpikingJelly would abort)."""


@dataclass
class CounterResult:
    """Counts of several counters over one trace selection."""

    frame: pd.DataFrame  # counter, scope, op, value (+ group columns)
    unsupported: pd.DataFrame  # counter, op, calls, tensor_bytes
    aborts: pd.DataFrame = field(default_factory=pd.DataFrame)  # compat: ops SpikingJelly aborts on
    selected_events: int = 0  # events of the selection no ignored module touches
    # extra views of some counters: counter, family, scope, metric, value (neuron_state's
    # "metrics" and "projection", SpikingJelly's get_metric_counts / get_projection_counts)
    details: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"counter": [], "family": [], "scope": [], "metric": [], "value": pd.Series([], dtype="int64")}))

    def coverage(self, counter: str) -> float:
        """Fraction of the selected events some rule of `counter` covers (1.0 when none)."""
        uncovered = sum(self.unsupported_of(counter).values())
        return 1.0 if self.selected_events == 0 else (self.selected_events - uncovered) / self.selected_events

    def totals(self) -> dict[str, int]:
        """Total per counter (its value at scope Global), 0 for a counter that counted nothing."""
        totals = {c: 0 for c in self.frame["counter"].unique()}
        globals_ = self.frame[self.frame["scope"] == "Global"]
        totals.update({c: int(v) for c, v in globals_.groupby("counter")["value"].sum().items()})
        return totals

    def spikingjelly(self, counter: str) -> dict[str, dict[str, int]]:
        """SpikingJelly's get_counts() shape: {scope: {op: value}} (summed over any group columns)."""
        rows = self.frame[self.frame["counter"] == counter]
        summed = rows.groupby(["scope", "op"], sort=False)["value"].sum()
        result: dict[str, dict[str, int]] = {}
        for (scope, op), value in summed.items():
            result.setdefault(scope, {})[op] = int(value)
        return result

    def details_of(self, counter: str, family: str) -> dict[str, dict[str, int]]:
        """{scope: {metric: value}} of one extra view, e.g. ("neuron_state", "metrics")."""
        rows = self.details[(self.details["counter"] == counter) & (self.details["family"] == family)]
        result: dict[str, dict[str, int]] = {}
        for scope, metric, value in zip(rows["scope"], rows["metric"], rows["value"]):
            result.setdefault(scope, {})[metric] = int(value)
        return result

    def unsupported_of(self, counter: str) -> dict[str, int]:
        rows = self.unsupported[self.unsupported["counter"] == counter]
        return {op: int(n) for op, n in zip(rows["op"], rows["calls"])}


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def rules_of(module: ModuleType, compat: str | None) -> dict[str, str]:
    rules = dict(module.RULES)
    if compat == "spikingjelly":
        for op, rule in module.SPIKINGJELLY.items():
            if rule is None:
                rules.pop(op, None)
            else:
                rules[op] = rule
    return rules


def case_expression(rules: dict[str, str]) -> str:
    arms = "\n".join(f"WHEN {_sql_string(op)} THEN CAST(({rule}) AS BIGINT)" for op, rule in rules.items())
    return f"CASE op\n{arms}\nELSE NULL END"


def ignored_scopes_sql(names: list[str], compat: str | None) -> str:
    """(rank, scope_id) of scopes in which a module matching `names` is active."""
    if not names:
        return "SELECT NULL::INTEGER AS rank, NULL::INTEGER AS scope_id WHERE false"
    listed = "[" + ", ".join(_sql_string(n) for n in names) + "]"
    running = "" if compat == "spikingjelly" else "AND list_contains(s.parents, coalesce(m.tracker_name, m.path))"
    return f"""
        SELECT DISTINCT s.rank, s.scope_id
        FROM scopes s, UNNEST(s.active_modules) AS a(module_id)
        JOIN modules m ON m.rank = s.rank AND m.module_id = a.module_id
        WHERE (list_has_any(m.mro, {listed}) OR list_contains({listed}, m.class_name)
               OR list_contains({listed}, m.path)) {running}
    """


def event_chunks(con, where: str, chunk_events: int):
    """(events filter, event_tensors filter) per chunk of about `chunk_events` events."""
    for rank, low, high, n in con.execute(
        f"SELECT rank, min(seq), max(seq), count(*) FROM events WHERE {where} GROUP BY rank ORDER BY rank"
    ).fetchall():
        pieces = max(1, -(-n // chunk_events))
        step = -(-(high - low + 1) // pieces)
        for start in range(low, high + 1, step):
            bounds = f"rank = {rank} AND seq >= {start} AND seq < {start + step}"
            yield f"({where}) AND {bounds}", bounds


def _summed(frames: list[pd.DataFrame], keys: list[str], values: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({**{k: pd.Series([], dtype=object) for k in keys}, **{v: pd.Series([], dtype="int64") for v in values}})
    frame = pd.concat(frames, ignore_index=True)
    return frame.groupby(keys, sort=False, dropna=False, as_index=False)[values].sum()


def count_events(
    con,
    counters: dict[str, ModuleType],
    *,
    where: str = "true",
    group_by: tuple[str, ...] = (),
    ignore_modules: list[str] = (),
    compat: str | None = None,
    strict: bool = False,
    chunk_events: int = 500_000,
) -> CounterResult:
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    for macro in MACROS:
        con.execute(macro)
    if not counters:
        empty = pd.DataFrame({"counter": [], "scope": [], "op": [], "value": pd.Series([], dtype="int64")})
        return CounterResult(empty, pd.DataFrame(columns=["counter", "op", "calls", "tensor_bytes"]))
    rules = {name: rules_of(module, compat) for name, module in counters.items()}
    values = {name: case_expression(r) for name, r in rules.items()}
    aborts = {
        name: module.SPIKINGJELLY_ABORTS for name, module in counters.items()
    } if compat == "spikingjelly" else {}
    abort_columns = {
        name: "CASE " + " ".join(f"WHEN op = {_sql_string(op)} AND ({cond}) THEN true" for op, cond in items.items()) + " ELSE false END"
        for name, items in aborts.items() if items
    }
    expressions = list(values.values()) + list(abort_columns.values())
    value_columns = ", ".join(f"{expr} AS value_{name}" for name, expr in values.items())
    abort_select = "".join(f", {expr} AS abort_{name}" for name, expr in abort_columns.items())
    ignored = ignored_scopes_sql(list(ignore_modules), compat)
    groups = "".join(f", v.{g}" for g in group_by)
    partial_values, partial_unsupported, partial_aborts = [], [], []
    selected = 0
    # Streamed in chunks of events, so memory stays bounded whatever the trace's size; the
    # per-chunk sums are added up at the end.
    for chunk, uses_where in event_chunks(con, where, chunk_events):
        con.register("op_facts_table", build_op_facts(con, expressions, chunk, uses_where))
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE counter_values AS
            SELECT f.rank, f.seq, f.op, f.step, f.stage, f.phase, f.scope_id, f.tensor_bytes, {value_columns}{abort_select}
            FROM op_facts_table f ANTI JOIN ({ignored}) i ON f.rank = i.rank AND f.scope_id = i.scope_id
        """)
        con.unregister("op_facts_table")
        selected += con.execute("SELECT count(*) FROM counter_values").fetchall()[0][0]
        for name in counters:
            partial_values.append(con.execute(f"""
                SELECT {_sql_string(name)} AS counter, p.scope, v.op{groups}, CAST(sum(v.value_{name}) AS BIGINT) AS value
                FROM counter_values v JOIN scopes s ON s.rank = v.rank AND s.scope_id = v.scope_id,
                     UNNEST(s.parents) AS p(scope)
                WHERE v.value_{name} IS NOT NULL
                GROUP BY ALL
            """).df())
            partial_unsupported.append(con.execute(f"""
                SELECT {_sql_string(name)} AS counter, op, count(*) AS calls, coalesce(sum(tensor_bytes), 0) AS tensor_bytes
                FROM counter_values WHERE value_{name} IS NULL GROUP BY op
            """).df())
            if name in abort_columns:
                partial_aborts.append(con.execute(f"""
                    SELECT {_sql_string(name)} AS counter, op, count(*) AS calls FROM counter_values
                    WHERE abort_{name} GROUP BY op
                """).df())
    frames = _summed(partial_values, ["counter", "scope", "op", *group_by], ["value"])
    unsupported = _summed(partial_unsupported, ["counter", "op"], ["calls", "tensor_bytes"])
    unsupported = unsupported.sort_values(["counter", "calls", "op"], ascending=[True, False, True], ignore_index=True)
    result = CounterResult(
        frame=frames.astype({"value": "int64"}),
        unsupported=unsupported.astype({"calls": "int64", "tensor_bytes": "int64"}),
        aborts=_summed(partial_aborts, ["counter", "op"], ["calls"]) if partial_aborts
        else pd.DataFrame(columns=["counter", "op", "calls"]),
        selected_events=int(selected),
    )
    if strict and (len(result.unsupported) or len(result.aborts)):
        first = result.unsupported.iloc[0] if len(result.unsupported) else result.aborts.iloc[0]
        raise StrictModeError(
            f"strict: {first['counter']} has no rule for {first['op']} ({int(first['calls'])} calls); "
            f"{len(result.unsupported)} uncovered (counter, op) pairs in all"
        )
    return result
