"""`op_facts`: one row per event with the operand facts that counter rules read.

Rules name operand facts by slot: `a<i>_<fact>` is the tensor passed as positional argument i,
`o<j>_<fact>` the j-th output, `a<i>_items_<fact>` the sum over the items of a tensor-list
argument, `k_<name>_<fact>` a keyword tensor. Facts: numel, bytes, shape, is01, nnz, present.
Always there: `tensor_bytes` (all the op's tensors) and `out_bytes` (all its outputs).
Only the columns the requested rules mention are built, so the relation stays as narrow as
the question asked of it. Op statistics appear as `stat_<name>`.
"""

from __future__ import annotations

import re

from schemas.statistics import STATISTICS

FACTS = ("numel", "bytes", "shape", "is01", "nnz", "present")
_SLOT = re.compile(r"\b(a|o)(\d+)_(items_)?(numel|bytes|shape|is01|nnz|present)\b")
_KWARG = re.compile(r"\bk_([a-z_]+?)_(numel|bytes|shape|is01|nnz|present)\b")
_STAT = re.compile(r"\bstat_([a-z_0-9]+)\b")

TENSOR_FACTS = """
    SELECT u.rank, u.seq, u.role, u.position, u.name, u.item,
           t.numel, t.numel * t.element_size AS bytes, t.shape, t.is01, t.nnz, true AS present
    FROM event_tensors u JOIN tensor_states t USING (tensor_id, rank)
"""


def _aggregate(fact: str, condition: str, items: bool) -> str:
    if items:
        return f"sum({fact}) FILTER (WHERE {condition} AND item IS NOT NULL)"
    if fact == "present":
        return f"coalesce(bool_or(present) FILTER (WHERE {condition} AND item IS NULL), false)"
    return f"any_value({fact}) FILTER (WHERE {condition} AND item IS NULL)"


def referenced_columns(expressions) -> tuple[list[str], list[str]]:
    """(operand columns, statistic names) the expressions mention."""
    text = "\n".join(expressions)
    columns = {m.group(0) for m in _SLOT.finditer(text)} | {m.group(0) for m in _KWARG.finditer(text)}
    stats = {m.group(1) for m in _STAT.finditer(text)}
    unknown = stats - set(STATISTICS)
    if unknown:
        raise ValueError(f"rules mention unknown op statistics: {sorted(unknown)}")
    return sorted(columns), sorted(stats)


def op_facts_sql(expressions, where: str = "true") -> str:
    """SQL of the op_facts relation for events matching `where`, with what `expressions` read."""
    columns, stats = referenced_columns(expressions)
    selects = []
    for column in columns:
        slot = _SLOT.fullmatch(column)
        if slot:
            kind, index, items, fact = slot.groups()
            role = "arg" if kind == "a" else "out"
            selects.append(f"{_aggregate(fact, f'role = {role!r} AND position = {index}', bool(items))} AS {column}")
        else:
            name, fact = _KWARG.fullmatch(column).groups()
            selects.append(f"{_aggregate(fact, f'role = {chr(39)}kwarg{chr(39)} AND name = {name!r}', False)} AS {column}")
    selects.append("sum(bytes) AS tensor_bytes")
    selects.append("sum(bytes) FILTER (WHERE role = 'out') AS out_bytes")
    stat_columns = "".join(f", s.stat_{name}" for name in stats)
    stat_join = ""
    if stats:
        pivot = ", ".join(f"any_value(value) FILTER (WHERE stat = '{name}') AS stat_{name}" for name in stats)
        stat_join = f"LEFT JOIN (SELECT rank, seq, {pivot} FROM op_stats GROUP BY rank, seq) s USING (rank, seq)"
    return f"""
        SELECT e.rank, e.seq, e.op, e.step, e.stage, e.phase, e.scope_id, e.args, e.kwargs,
               f.* EXCLUDE (rank, seq){stat_columns}
        FROM (SELECT * FROM events WHERE {where}) e
        LEFT JOIN (SELECT rank, seq, {', '.join(selects)} FROM ({TENSOR_FACTS}) GROUP BY rank, seq) f USING (rank, seq)
        {stat_join}
    """
