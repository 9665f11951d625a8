"""The vocabulary of `op_facts`, one row per event with the operand facts counter rules read
(built by analyze/counters/gather.py).

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

_SLOT = re.compile(r"\b(a|o)(\d+)_(items_)?(numel|bytes|shape|is01|nnz|present)\b")
_KWARG = re.compile(r"\bk_([a-z_]+?)_(numel|bytes|shape|is01|nnz|present)\b")
_STAT = re.compile(r"\bstat_([a-z_0-9]+)\b")

def referenced_columns(expressions) -> tuple[list[str], list[str]]:
    """(operand columns, statistic names) the expressions mention."""
    text = "\n".join(expressions)
    columns = {m.group(0) for m in _SLOT.finditer(text)} | {m.group(0) for m in _KWARG.finditer(text)}
    stats = {m.group(1) for m in _STAT.finditer(text)}
    unknown = stats - set(STATISTICS)
    if unknown:
        raise ValueError(f"rules mention unknown op statistics: {sorted(unknown)}")
    return sorted(columns), sorted(stats)


def slots(columns: list[str]) -> dict[tuple[str, str, bool], set[str]]:
    """(kind, position or name, items?) -> the facts read of that slot."""
    slots: dict[tuple[str, str, bool], set[str]] = {}
    for column in columns:
        slot = _SLOT.fullmatch(column)
        if slot:
            kind, index, items, fact = slot.groups()
            slots.setdefault((kind, index, bool(items)), set()).add(fact)
        else:
            name, fact = _KWARG.fullmatch(column).groups()
            slots.setdefault(("k", name, False), set()).add(fact)
    return slots
