"""Evaluate counter rule tables over a trace, all events at once, in DuckDB.

Per event, a counter's value is `CASE op WHEN <op> THEN <rule> ... END` over op_facts; NULL
means no rule covers the op (or the rule's value is NULL, which counts the same).
Attribution follows SpikingJelly: an event's value goes to every scope name in the
tracker's `parents` at that op, "Global" included, and an op a rule covers is recorded even
when its value is 0. An event is skipped (neither counted nor unsupported) when an ignored
module is active: by default only modules really running (their scope name is in
`parents`); under compat="spikingjelly" also those its tracker left active after backward.

How, for speed (the numbers are those of the definition above): events stream in chunks,
read and gathered by a second thread while the previous chunk is evaluated. Ops are grouped
by the op_facts columns their rules read (partitions.py); per group, gather.py builds just
those columns for just its events, and one SQL pass sums every counter's values per (rank,
scope, op, group columns). Only these small sums are then attributed to the scopes' parents.
"""

from __future__ import annotations

import queue
import threading
from contextlib import closing
from types import ModuleType

import numpy as np
import pandas as pd
import pyarrow as pa

from spiketrace.analyze.counters.applicability import applies
from spiketrace.analyze.counters.facts import JSON_READ, columns_of, compile_rule, json_read_source, json_reads
from spiketrace.analyze.counters.gather import JsonReadError, OpFactsBuilder
from spiketrace.analyze.counters.partitions import Partition, partitions
from spiketrace.analyze.counters.result import CounterResult, StrictModeError
from spiketrace.analyze.counters.sql import MACROS
from spiketrace.analyze.counters.totals import reducer, totals_frame
from spiketrace.analyze.counters.user_rules import USER_RULES
from spiketrace.analyze.progress import each

COMPAT_MODES = (None, "spikingjelly")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def rules_of(module: ModuleType, compat: str | None) -> dict[str, str]:
    """The counter's rule table: shipped, SpikingJelly's where compat asks, then the user's
    (analyze/counters/user_rules.py), which apply in every mode, as SpikingJelly's
    extra_rules do."""
    rules = dict(module.RULES)
    if compat == "spikingjelly":
        for op, rule in module.SPIKINGJELLY.items():
            if rule is None:
                rules.pop(op, None)
            else:
                rules[op] = rule
    rules.update(USER_RULES.get(module.__name__.rsplit(".", 1)[-1], {}))
    return rules


def case_expression(rules: dict[str, str], calls: dict[str, int], op_codes: dict[str, int], others=()) -> str:
    """`CASE op WHEN <op> THEN CAST((<rule>) AS BIGINT) ... END` over the column op_code, for
    the ops of `rules` and `others` (ops no rule covers). Ops that share a rule share an arm
    and arms go most frequent first (`calls`): CASE tests each row against the arms in order."""
    by_rule: dict[str, list[str]] = {}
    for op, rule in rules.items():
        by_rule.setdefault(rule, []).append(op)
    if not by_rule:
        return "NULL::BIGINT"

    def codes(ops) -> str:
        return ", ".join(str(op_codes[op]) for op in sorted(ops))

    arms = sorted(by_rule.items(), key=lambda item: -sum(calls.get(op, 0) for op in item[1]))
    tests = "".join(f"\nWHEN op_code IN ({codes(ops)}) THEN CAST(({rule}) AS BIGINT)" for rule, ops in arms)
    return f"CASE{f' WHEN op_code IN ({codes(others)}) THEN NULL' if others else ''}{tests}\nELSE NULL END"


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
    """(rank, low, high) per chunk of about `chunk_events` events (low <= seq < high), and the
    events per op of the selection."""
    chunks, calls, ranks = [], dict[str, int](), dict[int, tuple[int, int, int]]()
    for rank, op, low, high, n in con.execute(
        f"SELECT rank, op, min(seq), max(seq), count(*) FROM events WHERE {where} GROUP BY rank, op"
    ).fetchall():
        calls[op] = calls.get(op, 0) + n
        old = ranks.get(rank, (low, high, 0))
        ranks[rank] = (min(old[0], low), max(old[1], high), old[2] + n)
    for rank, (low, high, n) in sorted(ranks.items()):
        pieces = max(1, -(-n // chunk_events))
        step = -(-(high - low + 1) // pieces)
        chunks += [(rank, start, start + step) for start in range(low, high + 1, step)]
    return chunks, calls


def _summed(frames: list[pd.DataFrame], keys: list[str], values: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame({k: pd.Series([], dtype=object) for k in keys} | {v: pd.Series([], dtype="int64") for v in values})
    frame = pd.concat(frames, ignore_index=True)
    return frame.groupby(keys, sort=False, dropna=False, as_index=False)[values].sum()


class _Plan:
    """The partitions of the selected ops and their SQL: per partition one pass that sums
    every counter per (scope, op, group columns): its value where a rule covers the event
    (count() of the values tells which groups to report), the calls and tensor bytes where
    none does, and the events SpikingJelly aborts on."""

    def __init__(self, counters, calls, compat, group_by, read_json: bool) -> None:
        self.ops = sorted(calls)
        op_codes = {op: i for i, op in enumerate(self.ops)}
        self.rules = {name: {op: compile_rule(rule) for op, rule in rules_of(module, compat).items() if op in calls}
                      for name, module in counters.items()}
        self.aborts = {
            name: {op: compile_rule(cond) for op, cond in module.SPIKINGJELLY_ABORTS.items() if op in calls}
            for name, module in counters.items() if compat == "spikingjelly" and module.SPIKINGJELLY_ABORTS
        }
        self.json_reads = {}
        if read_json:  # typed JSON reads become columns evaluated once per distinct string
            tables = (*self.rules.values(), *self.aborts.values())
            names = {read: f"json_{i}" for i, read in enumerate(json_reads(e for t in tables for e in t.values()))}
            for table in tables:
                for op, expression in table.items():
                    table[op] = JSON_READ.sub(lambda m: names[m.group(0)], expression)
            for read, name in names.items():
                users = sorted({op_codes[op] for t in tables for op, e in t.items() if name in columns_of(e)})
                self.json_reads[name] = (json_read_source(read), read, users)
        reads: dict[str, set[str]] = {}
        for table in (*self.rules.values(), *self.aborts.values()):
            for op, expression in table.items():
                reads.setdefault(op, set()).update(columns_of(expression))
        self.parts = partitions(calls, reads)
        self.part_of_op = np.zeros(max(len(self.ops), 1), dtype=np.int16)
        for number, part in enumerate(self.parts):
            self.part_of_op[[op_codes[op] for op in part.ops]] = number
            part.sql = self._sql(part, calls, op_codes, group_by)
        self.readers: dict[str, set[int]] = {}  # column -> codes of the ops whose rules read it
        for op, columns in reads.items():
            for column in columns:
                self.readers.setdefault(column, set()).add(op_codes[op])

    def _sql(self, part: Partition, calls, op_codes, group_by) -> str:
        """The partition's pass over its op_facts_table: per (scope, op, group columns) the
        calls and, per counter, the sum and count of its values and the tensor bytes where
        it has none (and under compat the events SpikingJelly aborts on)."""
        keys = "scope_id, op_code" + "".join(f", {g}" for g in group_by if g != "rank")
        values, aborts = {}, {}
        for name, table in self.rules.items():
            covered = {op: table[op] for op in part.ops if op in table}
            if covered:
                values[name] = case_expression(covered, calls, op_codes, [op for op in part.ops if op not in table])
        for name, table in self.aborts.items():
            tests = "".join(f"WHEN op_code = {op_codes[op]} AND ({table[op]}) THEN true " for op in part.ops if op in table)
            if tests:
                aborts[name] = f"CASE {tests}ELSE false END"

        def select(columns: dict[str, str]) -> str:  # the partial sums' columns, in their order
            names = ["calls", "tensor_bytes"] + [f"{c}_{n}" for n in self.rules for c in ("value", "counted", "uncovered_bytes")]
            names += [f"aborts_{n}" for n in self.aborts]
            return f"rank, {keys}, " + ", ".join(
                f"{columns.get(c, 'NULL::BIGINT' if c.startswith('value_') else '0::BIGINT')} AS {c}" for c in names)

        sums = {"calls": "count(*)", "tensor_bytes": "CAST(sum(tensor_bytes) AS BIGINT)"}
        for name in self.rules:
            sums[f"uncovered_bytes_{name}"] = "CAST(sum(tensor_bytes) AS BIGINT)"  # where no rule covers the op
        for name in values:
            sums |= {f"value_{name}": f"CAST(sum(value_{name}) AS BIGINT)", f"counted_{name}": f"count(value_{name})",
                     f"uncovered_bytes_{name}": f"CAST(sum(tensor_bytes) FILTER (WHERE value_{name} IS NULL) AS BIGINT)"}
        sums |= {f"aborts_{name}": f"count(*) FILTER (WHERE abort_{name})" for name in aborts}
        per_event = ", tensor_bytes" + "".join(f", {e} AS value_{n}" for n, e in values.items())
        per_event += "".join(f", {e} AS abort_{n}" for n, e in aborts.items())
        return f"SELECT {select(sums)} FROM (SELECT rank, {keys}{per_event} FROM op_facts_table) GROUP BY rank, {keys}"

    def sums(self, con, chunks, where, group_by, ignored, batch_cells: int = 1 << 22, reduce=None,
             progress: bool = False) -> list:
        """Per partition, the sums over the events of `chunks` (see event_chunks). A second
        thread, on its own cursor, reads and gathers the next chunk while this one evaluates
        the current: each side waits on the other (DuckDB, numpy) much of the time, and at
        most two chunks are alive at once. The partitions' op_facts are kept till they hold
        `batch_cells` cells, then the largest is evaluated: planning a partition's SQL costs
        about as much as running it on a chunk, so one of few events is evaluated once for
        many chunks. `reduce`, when given, turns each pass's sums into what is kept (so what is
        kept stays small when the passes group by more than is reported). `progress`: a bar
        over the chunks on a terminal (analyze/progress.py)."""
        ticks = iter(each(range(len(chunks)), "counting", "chunk", enabled=progress and len(chunks) > 1))
        builder = OpFactsBuilder(con.cursor(), self.readers, self.ops, group_by, self.json_reads)
        pending: dict[int, list[pa.Table]] = {number: [] for number in range(len(self.parts))}
        partials = []

        def evaluate(number: int) -> None:
            con.register("op_facts_table", pa.concat_tables(pending[number]))
            pending[number] = []
            try:
                table = con.sql(self.parts[number].sql).to_arrow_table()
                partials.append(table if reduce is None else reduce(table))
            finally:
                con.unregister("op_facts_table")

        try:
            with closing(_prefetched(builder, where, chunks)) as prefetched:
                for rank, chunk in prefetched:
                    builder.finish(chunk, con)
                    for number, facts in self._chunk_facts(rank, chunk, ignored.get(rank, [])):
                        pending[number].append(facts)
                    cells = {n: sum(t.num_rows * t.num_columns for t in tables) for n, tables in pending.items()}
                    while sum(cells.values()) >= batch_cells:  # the largest first, till few remain
                        number = max(cells, key=cells.__getitem__)
                        evaluate(number)
                        cells[number] = 0
                    del chunk  # before the next one arrives
                    next(ticks, None)
            for number, tables in pending.items():
                if tables:
                    evaluate(number)
        finally:
            builder.con.close()
            getattr(ticks, "close", lambda: None)()
        return partials

    def _chunk_facts(self, rank: int, chunk, ignored: np.ndarray):
        """(partition number, op_facts of its events in `chunk`)."""
        kept = np.flatnonzero(~np.isin(chunk.scope_id, ignored))
        part_of_event = self.part_of_op[chunk.op_code[kept]]
        order = kept[np.argsort(part_of_event, kind="stable")]
        ends = np.cumsum(np.bincount(part_of_event, minlength=len(self.parts)))
        for number, part in enumerate(self.parts):
            rows = order[ends[number - 1] if number else 0:ends[number]]
            if len(rows):
                yield number, chunk.table(rows, part.columns)


def _prefetched(builder: OpFactsBuilder, where: str, chunks):
    """(rank, ChunkFacts) of each chunk, the next one built in a thread while the caller works
    on the current one (built only once the current one was handed over)."""
    requests, results = queue.Queue[bool](), queue.Queue[tuple | BaseException]()

    def work() -> None:
        for rank, low, high in chunks:
            if not requests.get():
                return
            try:
                results.put((rank, builder.build(where, rank, low, high)))
            except BaseException as error:  # noqa: BLE001 -- handed to the caller, which raises it
                results.put(error)
                return

    thread = threading.Thread(target=work, name="spiketrace-gather", daemon=True)
    thread.start()
    try:
        requests.put(True)
        for number in range(len(chunks)):
            result = results.get()
            if isinstance(result, BaseException):
                raise result
            if number + 1 < len(chunks):
                requests.put(True)  # the next one, while the caller works on this one
            rank, chunk = result
            del result
            yield rank, chunk
            del chunk
    finally:
        requests.put(False)
        thread.join()


def _ignored_scope_ids(con, ignore_modules, compat) -> dict[int, np.ndarray]:
    ignored: dict[int, list[int]] = {}
    for rank, scope_id in con.execute(ignored_scopes_sql(list(ignore_modules), compat)).fetchall():
        ignored.setdefault(rank, []).append(scope_id)
    return {rank: np.array(ids, dtype=np.int64) for rank, ids in ignored.items()}


def _attribute(con, names, aborts, group_by) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """From the sums in counter_partials, of every counter: its values per (scope, op, group)
    with the scopes' parents, its uncovered calls and bytes per op, its aborts per op."""
    keys = "".join(f", {g}" for g in group_by if g != "rank")
    partials = "(SELECT * FROM counter_partials JOIN counter_ops USING (op_code))"

    def union(select: str, counters) -> str:
        return " UNION ALL ".join(select.format(c=name, name=_sql_string(name)) for name in counters)

    values = con.execute(f"""
        SELECT v.counter, a.scope, v.op{"".join(f", v.{g}" for g in group_by)}, CAST(sum(v.value) AS BIGINT) AS value
        FROM ({union(f"SELECT {{name}} AS counter, rank, scope_id, op{keys}, value_{{c}} AS value FROM {partials} "
                     "WHERE counted_{c} > 0", names)}) v
             JOIN scopes s ON s.rank = v.rank AND s.scope_id = v.scope_id, UNNEST(s.parents) AS a(scope)
        GROUP BY ALL
    """).df()
    unsupported = con.execute(f"""
        SELECT counter, op, CAST(sum(calls) AS BIGINT) AS calls, CAST(coalesce(sum(bytes), 0) AS BIGINT) AS tensor_bytes
        FROM ({union(f"SELECT {{name}} AS counter, op, calls - counted_{{c}} AS calls, uncovered_bytes_{{c}} AS bytes "
                     f"FROM {partials} WHERE calls > counted_{{c}}", names)})
        GROUP BY counter, op
    """).df()
    aborted = con.execute(f"""
        SELECT counter, op, CAST(sum(calls) AS BIGINT) AS calls
        FROM ({union(f"SELECT {{name}} AS counter, op, aborts_{{c}} AS calls FROM {partials} WHERE aborts_{{c}} > 0", aborts)})
        GROUP BY counter, op
    """).df() if aborts else None
    return values, unsupported, aborted


def count_events(
    con,
    counters: dict[str, ModuleType],
    *,
    where: str = "true",
    group_by: tuple[str, ...] = (),
    totals_by: tuple[str, ...] = (),
    ignore_modules: list[str] | tuple[str, ...] = (),
    compat: str | None = None,
    strict: bool = False,
    chunk_events: int = 500_000,
    progress: bool = False,
) -> CounterResult:
    """The counters over the events of `where`, per (scope, op, group_by). `totals_by` (of
    stage, phase, step, rank) adds result.group_totals: each counter's Global value per those
    columns, summed as the chunks stream (bounded memory however many steps there are)."""
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    for macro in MACROS:
        con.execute(macro)
    if not counters:
        empty = pd.DataFrame({"counter": [], "scope": [], "op": [], "value": pd.Series([], dtype="int64")})
        return CounterResult(empty, pd.DataFrame(columns=["counter", "op", "calls", "tensor_bytes"]))
    chunks, calls = event_chunks(con, where, chunk_events)
    ignored = _ignored_scope_ids(con, ignore_modules, compat)
    passes_by = tuple(dict.fromkeys([*group_by, *totals_by]))
    reduce = reducer(tuple(group_by), tuple(totals_by), list(counters)) if totals_by else None
    plan = _Plan(counters, calls, compat, passes_by, read_json=True)
    # Streamed in chunks of events, so memory stays bounded whatever the trace's size; the
    # per-chunk sums are added up at the end.
    try:
        partials = plan.sums(con, chunks, where, passes_by, ignored, reduce=reduce, progress=progress)
    except JsonReadError:  # then as written: each JSON read per event, where its rule reaches it
        plan = _Plan(counters, calls, compat, passes_by, read_json=False)
        partials = plan.sums(con, chunks, where, passes_by, ignored, reduce=reduce)
    group_totals = None
    if totals_by:
        group_totals = totals_frame([t for _, t in partials], list(counters), tuple(totals_by))
        partials = [d for d, _ in partials]
    values, unsupported, selected, selected_bytes = list[pd.DataFrame](), list[pd.DataFrame](), 0, 0
    aborted = [pd.DataFrame()] if chunks and plan.aborts else []  # typed empty frames when nothing ran
    if partials:
        con.register("counter_partials", pa.concat_tables(partials))
        con.register("counter_ops", pa.table({"op_code": pa.array(range(len(plan.ops)), pa.int32()), "op": plan.ops}))
        try:
            selected, selected_bytes = con.execute("SELECT CAST(coalesce(sum(calls), 0) AS BIGINT), CAST(coalesce("
                                                   "sum(tensor_bytes), 0) AS BIGINT) FROM counter_partials").fetchone()
            values, unsupported, aborts = _attribute(con, list(counters), plan.aborts, group_by)
            values, unsupported, aborted = [values], [unsupported], [aborts] if aborts is not None else []
        finally:
            con.unregister("counter_partials")
            con.unregister("counter_ops")
    frames = _summed(values, ["counter", "scope", "op", *group_by], ["value"])
    # partial sums arrive in thread order: fix one order (counters as given, then scope, op,
    # groups) so every table, CSV and JSON built from the frame is the same from run to run
    position = {name: i for i, name in enumerate(counters)}
    frames = frames.assign(_counter=frames["counter"].map(position)).sort_values(
        ["_counter", "scope", "op", *group_by], ignore_index=True, kind="stable").drop(columns="_counter")
    unsupported = _summed(unsupported, ["counter", "op"], ["calls", "tensor_bytes"])
    unsupported = unsupported.sort_values(["counter", "calls", "op"], ascending=[True, False, True], ignore_index=True)
    unsupported = unsupported.astype({"calls": "int64", "tensor_bytes": "int64"})
    # SpikingJelly knows no "not applicable": under compat every op without a rule is uncovered
    exempt = np.array([compat is None and not applies(c, op) for c, op in zip(unsupported["counter"], unsupported["op"])],
                      dtype=bool)
    result = CounterResult(
        frame=frames.astype({"value": "int64"}),
        unsupported=unsupported[~exempt].reset_index(drop=True),
        not_applicable=unsupported[exempt].reset_index(drop=True),
        selected_bytes=int(selected_bytes),
        aborts=_summed(aborted, ["counter", "op"], ["calls"]) if aborted
        else pd.DataFrame(columns=["counter", "op", "calls"]),
        selected_events=int(selected),
        group_totals=group_totals,
    )
    if strict and (len(result.unsupported) or len(result.aborts)):
        first = result.unsupported.iloc[0] if len(result.unsupported) else result.aborts.iloc[0]
        raise StrictModeError(
            f"strict: {first['counter']} has no rule for {first['op']} ({int(first['calls'])} calls); "
            f"{len(result.unsupported)} uncovered (counter, op) pairs in all"
        )
    return result
